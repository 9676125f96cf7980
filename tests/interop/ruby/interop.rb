# Ruby's stomp gem (Debian's ruby-stomp) against a broker on 127.0.0.1:PORT.
# Run by tests/test_ruby_stomp.py: `ruby interop.rb PORT`; prints one JSON object of what it
# saw (the scenario tests/interop_scenario.py checks). The gem speaks STOMP 1.2 here (the
# CONNECT offers it); receipts are read as frames with Connection#receive.
require 'json'
require 'stomp'
require 'timeout'

port = Integer(ARGV.fetch(0))
seen = { connected: {}, receipts: [], first: [], second: [], topic: [], disconnect_receipts: [] }

def open_connection(port)
  Stomp::Connection.new(
    hosts: [{ login: 'guest', passcode: 'guest', host: '127.0.0.1', port: port }],
    reliable: false, connect_timeout: 10,
    connect_headers: { 'accept-version' => '1.2', 'host' => 'localhost', 'heart-beat' => '0,0' }
  )
end

# The next frame, which must be the RECEIPT for `id`.
def receipt?(conn, id)
  frame = conn.receive
  frame.command == 'RECEIPT' && frame.headers['receipt-id'] == id
end

def message(conn)
  frame = conn.receive
  raise "expected a MESSAGE, got #{frame.command}: #{frame.headers.inspect}" unless frame.command == 'MESSAGE'
  frame
end

def noted(frame)
  { command: frame.command, body: frame.body, n: frame.headers['n'], destination: frame.headers['destination'] }
end

def disconnect_with_receipt(conn, id)
  conn.disconnect(receipt: id)
  receipt = conn.disconnect_receipt
  !receipt.nil? && receipt.command == 'RECEIPT' && receipt.headers['receipt-id'] == id
end

begin
  Timeout.timeout(30) do
    a = open_connection(port)
    seen[:connected] = { version: a.connection_frame.headers['version'], session: !a.connection_frame.headers['session'].nil? }

    # Five messages and a binary one to queues with no consumer yet, each with a receipt.
    5.times do |n|
      a.publish('/queue/interop.q', "m#{n}", n: n.to_s, receipt: "r#{n}")
      seen[:receipts] << receipt?(a, "r#{n}")
    end
    binary = "nul\0inside \u00e9t\u00e9 \u65e5\u672c".b
    a.publish('/queue/interop.bin', binary, receipt: 'r-bin')  # the gem sets content-length
    seen[:receipts] << receipt?(a, 'r-bin')

    # A consumer at client ack and prefetch 1 takes three, acknowledges two, and leaves.
    a.subscribe('/queue/interop.q', { ack: 'client-individual', 'activemq.prefetchSize' => '1' }, 'q')
    3.times do |i|
      frame = message(a)
      seen[:first] << noted(frame)
      a.ack(frame.headers['ack']) if i < 2
    end
    seen[:disconnect_receipts] << disconnect_with_receipt(a, 'bye-a')

    # A second connection gets the one left unacknowledged and the rest.
    b = open_connection(port)
    b.subscribe('/queue/interop.q', { ack: 'client-individual' }, 'q')  # default prefetch: back to back
    3.times do
      frame = message(b)
      seen[:second] << noted(frame)
      b.ack(frame.headers['ack'])
    end
    b.subscribe('/queue/interop.bin', { ack: 'auto' }, 'bin')
    frame = message(b)
    seen[:binary] = { hex: frame.body.b.unpack1('H*'), content_length: frame.headers['content-length'] }

    # A topic with two subscribers, each subscribed (receipt) before the message is sent.
    c = open_connection(port)
    b.subscribe('/topic/interop.t', { ack: 'auto', receipt: 'sub-b' }, 't')
    seen[:topic_receipts] = [receipt?(b, 'sub-b')]
    c.subscribe('/topic/interop.t', { ack: 'auto', receipt: 'sub-c' }, 't')
    seen[:topic_receipts] << receipt?(c, 'sub-c')
    c.publish('/topic/interop.t', 'to all')
    seen[:topic] = [message(b).body, message(c).body]

    seen[:disconnect_receipts] << disconnect_with_receipt(b, 'bye-b')
    seen[:disconnect_receipts] << disconnect_with_receipt(c, 'bye-c')
  end
rescue StandardError, Timeout::Error => e
  seen[:error] = "#{e.class}: #{e.message}"
  puts JSON.generate(seen)
  exit 1
end
puts JSON.generate(seen)
exit 0
