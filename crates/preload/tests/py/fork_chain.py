"""A listener shared down a chain of forks (issue 17, fork under the preload).

    python3 fork_chain.py PORT N

The parent listens on PORT and forks a child; the child accepts one connection and
answers `child:<what it read>`, then forks a grandchild and waits for it; the grandchild
accepts N connections, answering `grandchild:<what it read>` on each, the last one
followed by 4 MiB of `x` just before it exits. The parent only waits; it prints `done` on stderr when the chain has finished.
"""

import os
import socket
import sys

PORT, N = int(sys.argv[1]), int(sys.argv[2])
listener = socket.socket()
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
listener.bind(("0.0.0.0", PORT))
listener.listen(16)


def serve(tag, tail=b""):
    c, _ = listener.accept()
    c.sendall(tag + b":" + c.recv(100) + tail)
    c.close()


if os.fork() == 0:
    serve(b"child")
    if os.fork() == 0:
        for i in range(N):
            serve(b"grandchild", b"x" * (4 << 20) if i == N - 1 else b"")
        # exit, not _exit: the preload's exit hook sends what is still unsent.
        sys.exit(0)
    os.wait()
    sys.exit(0)
os.wait()
print("done", file=sys.stderr, flush=True)
