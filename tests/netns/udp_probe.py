#!/usr/bin/env python3
"""udp_probe.py: the bed's stand-in for ping (there may be none), used by
tests/netns/test_relay.sh to check the dsh-netem relay.

  udp_probe.py echo ADDRESS PORT SECONDS       echo every datagram back
  udp_probe.py send ADDRESS PORT COUNT GAP_MS  send COUNT numbered datagrams,
      print "sent N received N median_rtt_ms X" (received: echoes back
      within 1.5 s of the last send)
"""
import socket
import statistics
import sys
import time


def echo(address, port, seconds):
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((address, port))
    sock.settimeout(0.5)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            data, peer = sock.recvfrom(2048)
        except socket.timeout:
            continue
        sock.sendto(data, peer)


def send(address, port, count, gap_ms):
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setblocking(False)
    sent_at = {}
    rtts = []

    def collect():
        while True:
            try:
                data, _ = sock.recvfrom(2048)
            except BlockingIOError:
                return
            number = int(data.split(b" ")[0])
            if number in sent_at:
                rtts.append((time.monotonic() - sent_at.pop(number)) * 1000)

    for number in range(count):
        sent_at[number] = time.monotonic()
        sock.sendto(b"%d %s" % (number, b"x" * 200), (address, port))
        deadline = time.monotonic() + gap_ms / 1000
        while time.monotonic() < deadline:
            collect()
            time.sleep(0.0005)
    deadline = time.monotonic() + 1.5
    while time.monotonic() < deadline and sent_at:
        collect()
        time.sleep(0.005)
    median = statistics.median(rtts) if rtts else -1
    print("sent %d received %d median_rtt_ms %.1f" % (count, len(rtts), median))


if __name__ == "__main__":
    if sys.argv[1] == "echo":
        echo(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]))
    else:
        send(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]))
