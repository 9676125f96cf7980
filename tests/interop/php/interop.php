<?php
// PHP's PECL stomp extension (Debian's php-stomp) against a broker on 127.0.0.1:PORT.
// Run by tests/test_php_stomp.py: `php interop.php PORT`; prints one JSON object of what it
// saw (the scenario tests/interop_scenario.py checks). The extension speaks STOMP 1.0 (its
// CONNECT names no version); a send, subscribe or disconnect given a `receipt` header
// returns true only once that RECEIPT came back.
$port = $argv[1];
$url = "tcp://127.0.0.1:$port";
$seen = ["connected" => [], "receipts" => [], "first" => [], "second" => [], "topic" => [], "disconnect_receipts" => []];

function message(Stomp $stomp): array {
    $frame = $stomp->readFrame();
    if ($frame === false) {
        throw new Exception("no frame within the read timeout");
    }
    return ["command" => $frame->command, "body" => $frame->body, "n" => $frame->headers["n"] ?? null,
            "destination" => $frame->headers["destination"] ?? null, "frame" => $frame];
}

function noted(array $m): array {
    unset($m["frame"]);
    return $m;
}

// The extension's own DISCONNECT (its destructor) takes no headers; its send() takes a
// whole StompFrame too, which is how a DISCONNECT with a receipt goes out.
function disconnect_with_receipt(Stomp $stomp, string $receipt): bool {
    return $stomp->send("/queue/unused", new StompFrame("DISCONNECT", ["receipt" => $receipt]));
}

function open(string $url): Stomp {
    $stomp = new Stomp($url, "guest", "guest");
    $stomp->setReadTimeout(10);
    return $stomp;
}

try {
    $a = open($url);
    $seen["connected"] = ["version" => null, "session" => $a->getSessionId() !== false];

    // Five messages and a binary one to queues with no consumer yet, each with a receipt.
    for ($n = 0; $n < 5; $n++) {
        $seen["receipts"][] = $a->send("/queue/interop.q", "m$n", ["n" => "$n", "receipt" => "r$n"]);
    }
    $binary = "nul\0inside \u{e9}t\u{e9} \u{65e5}\u{672c}";
    $seen["receipts"][] = $a->send("/queue/interop.bin", $binary,
                                   ["content-length" => strlen($binary), "receipt" => "r-bin"]);

    // A consumer at client ack and prefetch 1 takes three, acknowledges two, and leaves.
    $a->subscribe("/queue/interop.q", ["ack" => "client", "activemq.prefetchSize" => "1"]);
    for ($i = 0; $i < 3; $i++) {
        $m = message($a);
        $seen["first"][] = noted($m);
        if ($i < 2) {
            $a->ack($m["frame"]);
        }
    }
    $seen["disconnect_receipts"][] = disconnect_with_receipt($a, "bye-a");
    unset($a);

    // A second connection gets the one left unacknowledged and the rest.
    $b = open($url);
    $b->subscribe("/queue/interop.q", ["ack" => "client"]);  // default prefetch: back to back
    for ($i = 0; $i < 3; $i++) {
        $m = message($b);
        $seen["second"][] = noted($m);
        $b->ack($m["frame"]);
    }
    $b->subscribe("/queue/interop.bin", ["ack" => "auto"]);
    $m = message($b);
    $seen["binary"] = ["hex" => bin2hex($m["body"]), "content_length" => $m["frame"]->headers["content-length"] ?? null];

    // A topic with two subscribers, each subscribed (receipt) before the message is sent.
    $c = open($url);
    $seen["topic_receipts"] = [$b->subscribe("/topic/interop.t", ["ack" => "auto", "receipt" => "sub-b"]),
                               $c->subscribe("/topic/interop.t", ["ack" => "auto", "receipt" => "sub-c"])];
    $c->send("/topic/interop.t", "to all");
    $seen["topic"] = [message($b)["body"], message($c)["body"]];

    $seen["disconnect_receipts"][] = disconnect_with_receipt($b, "bye-b");
    $seen["disconnect_receipts"][] = disconnect_with_receipt($c, "bye-c");
} catch (Throwable $e) {
    $seen["error"] = get_class($e) . ": " . $e->getMessage();
    echo json_encode($seen), "\n";
    exit(1);
}
echo json_encode($seen), "\n";
exit(0);
