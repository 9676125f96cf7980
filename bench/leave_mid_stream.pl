#!/usr/bin/perl
# The slow STOMP 1.0 consumer that leaves mid-stream, then a drainer that stops when idle,
# as a user's script does: Net::Stomp, client ack, prefetch 1, a 4 kB receive buffer, 20 ms
# of work before each ACK; after SECONDS it subscribes to a topic with a receipt, reads until
# the RECEIPT (the next queue MESSAGE comes meanwhile, unacknowledged), sends DISCONNECT and
# closes. A second connection (auto ack, prefetch 500) then reads the queue until nothing
# comes for IDLE seconds. Run by bench/leave_mid_stream.py:
#   perl leave_mid_stream.pl PORT SECONDS IDLE QUEUE   (prints JSON: acked, meanwhile, drained)
use strict; use warnings;
use JSON::PP; use Net::Stomp; use Socket qw(SOL_SOCKET SO_RCVBUF); use Time::HiRes qw(sleep time);
my ($port, $secs, $idle, $queue) = @ARGV;
my (@acked, @meanwhile, @drained);
my $stomp = Net::Stomp->new({ hostname => '127.0.0.1', port => $port });
$stomp->socket->setsockopt(SOL_SOCKET, SO_RCVBUF, 4096);
$stomp->connect({ login => 'guest', passcode => 'guest' });
$stomp->subscribe({ destination => $queue, ack => 'client', 'activemq.prefetchSize' => 1 });
my $t0 = time;
while (time - $t0 < $secs) {
    my $frame = $stomp->receive_frame({ timeout => 10 }) or die "no message\n";
    die "expected a MESSAGE, got " . $frame->command . "\n" unless $frame->command eq 'MESSAGE';
    sleep 0.02;
    $stomp->ack({ frame => $frame });
    push @acked, $frame->body;
}
$stomp->subscribe({ destination => '/topic/leave.mid.stream', ack => 'auto', receipt => 'sub-topic' });
while (1) {
    my $frame = $stomp->receive_frame({ timeout => 10 }) or die "no RECEIPT\n";
    last if $frame->command eq 'RECEIPT';
    push @meanwhile, $frame->body;
}
$stomp->disconnect;
my $d = Net::Stomp->new({ hostname => '127.0.0.1', port => $port });
$d->connect({ login => 'guest', passcode => 'guest' });
$d->subscribe({ destination => $queue, ack => 'auto', 'activemq.prefetchSize' => 500 });
while (my $frame = $d->receive_frame({ timeout => $idle })) {
    push @drained, $frame->body if $frame->command eq 'MESSAGE';
}
$d->disconnect;
print encode_json({acked => \@acked, meanwhile => \@meanwhile, drained => \@drained}), "\n";
