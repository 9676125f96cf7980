#!/usr/bin/perl
# The slow STOMP 1.0 consumer that leaves mid-stream, then a drainer: Net::Stomp, client ack,
# prefetch 1, a 4 kB receive buffer, 20 ms of work before each ACK; after SECONDS it subscribes
# to a topic with a receipt, reads until the RECEIPT (the next queue MESSAGE comes meanwhile,
# unacknowledged), sends DISCONNECT and closes. A second connection (auto ack, prefetch 500)
# then reads the queue:
# - EXPECT > 0: until it has every message the queue should still hold (EXPECT, all the
#   producer sent, less those acknowledged), or nothing came for IDLE seconds (a backstop);
# - EXPECT = 0: until nothing comes for IDLE seconds, as a user's script does. Silence does
#   not mean empty: a broker that is late (a stalled process, a starved event loop) looks the
#   same, and at auto ack whatever is on its way when the drainer leaves is gone.
# With GRACE > 0 it goes on reading for GRACE seconds more before its DISCONNECT, and lists
# apart what came after it would have stopped (late). With STALL_AT >= 0 it prints "stall" on
# stderr once it has STALL_AT messages; the bench then stops the broker for a while (0: before
# it subscribes, going on once the bench says on stdin that the broker has stopped). The
# times (epoch seconds) say when each phase ended. Run by bench/leave_mid_stream.py:
#   perl leave_mid_stream.pl PORT SECONDS IDLE QUEUE [EXPECT [GRACE [STALL_AT]]]
#   (prints JSON: acked, meanwhile, drained, late, partial, the longest wait, and the times)
use strict; use warnings; use IO::Handle;
use JSON::PP; use Net::Stomp; use Socket qw(SOL_SOCKET SO_RCVBUF); use Time::HiRes qw(sleep time);
my ($port, $secs, $idle, $queue, $expect, $grace, $stall_at) = @ARGV;
$expect //= 0; $grace //= 0; $stall_at //= -1;
STDERR->autoflush(1);
my (@acked, @meanwhile, @drained, @late, %at);
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
$at{left} = time;
my $d = Net::Stomp->new({ hostname => '127.0.0.1', port => $port });
$d->connect({ login => 'guest', passcode => 'guest' });
if ($stall_at == 0) {  # the broker stalls before it reads the SUBSCRIBE: the bench says when
    print STDERR "stall\n";
    <STDIN>;
}
$d->subscribe({ destination => $queue, ack => 'auto', 'activemq.prefetchSize' => 500 });
$at{drain_subscribed} = time;
my ($gap, $gap_at) = (0, 0);  # the longest wait for a message while draining, and before which one
while (!$expect or @acked + @drained < $expect) {
    my $frame = $d->receive_frame({ timeout => $idle }) or last;
    next unless $frame->command eq 'MESSAGE';
    push @drained, $frame->body;
    print STDERR "stall\n" if @drained == $stall_at;
    my $now = time;
    my $waited = $now - ($at{last_drained} // $at{drain_subscribed});
    ($gap, $gap_at) = ($waited, scalar @drained) if $waited > $gap;
    $at{last_drained} = $now;
}
$at{drain_idle} = time;
# Bytes of a frame not yet complete in Net::Stomp's own buffer when the drainer gave up.
my $partial = length($d->{_framebuf} // '');
while ($grace > 0 and (my $left = $at{drain_idle} + $grace - time) > 0) {
    my $frame = $d->receive_frame({ timeout => $left }) or last;
    push @late, [$frame->body, time] if $frame->command eq 'MESSAGE';
}
$d->disconnect;
$at{drain_left} = time;
print encode_json({acked => \@acked, meanwhile => \@meanwhile, drained => \@drained, late => \@late,
                   partial => $partial, gap => [$gap, $gap_at], at => \%at}), "\n";
