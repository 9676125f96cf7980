#!/usr/bin/perl
# Perl's Net::Stomp leaving a queue mid-stream, as a slow STOMP 1.0 consumer does: client ack,
# prefetch 1, a 4 kB receive buffer, 20 ms of work before each ACK; after ACKS messages it
# subscribes to a topic with a receipt, reads until the RECEIPT (the next queue MESSAGE comes
# meanwhile and is left unacknowledged), sends DISCONNECT and closes the socket at once.
# Run by tests/test_net_stomp.py: `perl leave_mid_stream.pl PORT ACKS`; prints JSON.
use strict;
use warnings;
use JSON::PP;
use Net::Stomp;
use Socket qw(SOL_SOCKET SO_RCVBUF);
use Time::HiRes qw(sleep);

my ($port, $acks) = @ARGV;
my %seen = (acked => [], meanwhile => []);
local $SIG{ALRM} = sub { $seen{timeout} = JSON::PP::true; print encode_json(\%seen), "\n"; exit 1 };
alarm 50;

my $stomp = Net::Stomp->new({ hostname => '127.0.0.1', port => $port });
$stomp->socket->setsockopt(SOL_SOCKET, SO_RCVBUF, 4096);
$stomp->connect({ login => 'guest', passcode => 'guest' });
$stomp->subscribe({ destination => '/queue/perl.leave', ack => 'client', 'activemq.prefetchSize' => 1 });
for (1 .. $acks) {
    my $frame = $stomp->receive_frame({ timeout => 10 }) or die "no message\n";
    die "expected a MESSAGE, got " . $frame->command . "\n" unless $frame->command eq 'MESSAGE';
    sleep 0.02;
    $stomp->ack({ frame => $frame });
    push @{ $seen{acked} }, $frame->body;
}
$stomp->subscribe({ destination => '/topic/perl.leave', ack => 'auto', receipt => 'sub-topic' });
while (1) {
    my $frame = $stomp->receive_frame({ timeout => 10 }) or die "no RECEIPT\n";
    last if $frame->command eq 'RECEIPT';
    push @{ $seen{meanwhile} }, $frame->body;
}
$stomp->disconnect;
print encode_json(\%seen), "\n";
exit 0;
