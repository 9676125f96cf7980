#!/usr/bin/perl
# Perl's Net::Stomp (Debian's libnet-stomp-perl) against a broker on 127.0.0.1:PORT.
# Run by tests/test_net_stomp.py: `perl interop.pl PORT`; prints one JSON object of what it
# saw (the scenario tests/interop_scenario.py checks). Net::Stomp speaks STOMP 1.0 (its
# CONNECT names no version): header values travel unescaped, a colon as it is.
use strict;
use warnings;
use JSON::PP;
use Net::Stomp;
use Net::Stomp::Frame;

my $port = shift @ARGV;
my %seen = (receipts => [], first => [], second => [], topic => [], topic_receipts => [], disconnect_receipts => []);
local $SIG{ALRM} = sub { $seen{error} = 'timeout'; print encode_json(\%seen), "\n"; exit 1 };
alarm 30;

sub open_connection {
    my $stomp = Net::Stomp->new({ hostname => '127.0.0.1', port => $port });
    my $connected = $stomp->connect({ login => 'guest', passcode => 'guest' });
    return ($stomp, $connected);
}

# Send FRAME's command with a receipt header; true when the next frame is that RECEIPT.
sub with_receipt {
    my ($stomp, $command, $headers, $id) = @_;
    $stomp->send_frame(Net::Stomp::Frame->new({ command => $command, headers => { %$headers, receipt => $id } }));
    my $frame = $stomp->receive_frame({ timeout => 10 });
    return ($frame && $frame->command eq 'RECEIPT' && $frame->headers->{'receipt-id'} eq $id) ? JSON::PP::true : JSON::PP::false;
}

sub message {
    my ($stomp) = @_;
    my $frame = $stomp->receive_frame({ timeout => 10 }) or die "no frame within 10 s\n";
    return $frame;
}

sub noted {
    my ($frame) = @_;
    return { command => $frame->command, body => $frame->body, n => $frame->headers->{n},
             destination => $frame->headers->{destination}, colon => $frame->headers->{colon} };
}

my ($a, $connected) = open_connection();
$seen{connected} = { version => $connected->headers->{version},
                     session => defined $connected->headers->{session} ? JSON::PP::true : JSON::PP::false };

# Five messages and a binary one to queues with no consumer yet, each with a receipt.
for my $n (0 .. 4) {
    push @{ $seen{receipts} }, $a->send_with_receipt({ destination => '/queue/interop.q', body => "m$n", n => $n,
                                                       colon => 'a:b' }) ? JSON::PP::true : JSON::PP::false;
}
my $binary = "nul\0inside \xc3\xa9t\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac";  # UTF-8 bytes
push @{ $seen{receipts} }, $a->send_with_receipt({ destination => '/queue/interop.bin', body => $binary,
                                                   'content-length' => length($binary) }) ? JSON::PP::true : JSON::PP::false;

# A consumer at client ack (cumulative in STOMP 1.0) and prefetch 1 takes three,
# acknowledges two, and leaves.
$a->subscribe({ destination => '/queue/interop.q', ack => 'client', 'activemq.prefetchSize' => 1 });
for my $i (0 .. 2) {
    my $frame = message($a);
    push @{ $seen{first} }, noted($frame);
    $a->ack({ frame => $frame }) if $i < 2;
}
push @{ $seen{disconnect_receipts} }, with_receipt($a, 'DISCONNECT', {}, 'bye-a');

# A second connection gets the one left unacknowledged and the rest.
my ($b) = open_connection();
$b->subscribe({ destination => '/queue/interop.q', ack => 'client' });  # default prefetch: back to back
for (1 .. 3) {
    my $frame = message($b);
    push @{ $seen{second} }, noted($frame);
    $b->ack({ frame => $frame });
}
$b->subscribe({ destination => '/queue/interop.bin', ack => 'auto' });
my $bin = message($b);
$seen{binary} = { hex => unpack('H*', $bin->body), content_length => $bin->headers->{'content-length'} };

# A topic with two subscribers, each subscribed (receipt) before the message is sent.
my ($c) = open_connection();
push @{ $seen{topic_receipts} }, with_receipt($b, 'SUBSCRIBE', { destination => '/topic/interop.t', ack => 'auto' }, 'sub-b');
push @{ $seen{topic_receipts} }, with_receipt($c, 'SUBSCRIBE', { destination => '/topic/interop.t', ack => 'auto' }, 'sub-c');
$c->send({ destination => '/topic/interop.t', body => 'to all' });
$seen{topic} = [message($b)->body, message($c)->body];

push @{ $seen{disconnect_receipts} }, with_receipt($b, 'DISCONNECT', {}, 'bye-b');
push @{ $seen{disconnect_receipts} }, with_receipt($c, 'DISCONNECT', {}, 'bye-c');
print encode_json(\%seen), "\n";
exit 0;
