#!/usr/bin/perl
# Perl's Net::Stomp (Debian's libnet-stomp-perl) against a broker on 127.0.0.1:PORT.
# Run by tests/test_net_stomp.py: `perl interop.pl PORT`; prints one JSON object of what it saw.
use strict;
use warnings;
use JSON::PP;
use Net::Stomp;

my $port = shift @ARGV;
my %seen = (queue => [], topic => []);
local $SIG{ALRM} = sub { $seen{timeout} = JSON::PP::true; print encode_json(\%seen), "\n"; exit 1 };
alarm 20;

my $stomp = Net::Stomp->new({ hostname => '127.0.0.1', port => $port });
my $connected = $stomp->connect({ login => 'guest', passcode => 'guest' });
$seen{connected} = { command => $connected->command, version => $connected->headers->{version},
                     session => $connected->headers->{session} };

# Five messages to a queue with no consumer yet; the last with a receipt (send_with_receipt waits for it).
for my $n (0 .. 2) {
    $stomp->send({ destination => '/queue/perl.q', body => "m$n", n => $n, colon => 'a:b' });
}
$stomp->send({ destination => '/queue/perl.q', body => "nul\0inside", n => 'bin',
               'content-length' => length("nul\0inside") });
$seen{send_with_receipt} = $stomp->send_with_receipt({ destination => '/queue/perl.q', body => 'last', n => 'last' })
    ? JSON::PP::true : JSON::PP::false;

# A consumer at client ack (cumulative in STOMP 1.0) and prefetch 1: one at a time, each acknowledged.
$stomp->subscribe({ destination => '/queue/perl.q', ack => 'client', 'activemq.prefetchSize' => 1 });
for (1 .. 5) {
    my $frame = $stomp->receive_frame;
    push @{ $seen{queue} }, { command => $frame->command, n => $frame->headers->{n}, body => $frame->body,
                              colon => $frame->headers->{colon}, destination => $frame->headers->{destination},
                              has_id => defined $frame->headers->{'message-id'} ? JSON::PP::true : JSON::PP::false };
    $stomp->ack({ frame => $frame });
}
$stomp->unsubscribe({ destination => '/queue/perl.q' });

# A topic: the SUBSCRIBE is handled before the SEND that follows it on the same connection.
$stomp->subscribe({ destination => '/topic/perl.t', ack => 'auto' });
$stomp->send({ destination => '/topic/perl.t', body => 'to all' });
push @{ $seen{topic} }, $stomp->receive_frame->body;

# Nothing waits on the queue any more: the five were acknowledged.
$seen{can_read_after} = $stomp->can_read({ timeout => 0.3 }) ? JSON::PP::true : JSON::PP::false;
$stomp->disconnect;
print encode_json(\%seen), "\n";
exit 0;
