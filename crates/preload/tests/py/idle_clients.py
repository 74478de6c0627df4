"""N idle HTTP keep-alive connections to one server, held (issue 17: nginx's 10,000).

    python3 idle_clients.py HOST PORT N

Opens N connections (at most 256 connecting at once), sends `GET /` on each and reads the
whole answer (Content-Length), then prints `held N` and keeps every connection open, idle,
until a line comes on stdin; then asks `GET /` again on every one and prints
`answered M` (M: the connections that answered 200 again, all N if they were all held),
and exits 0 if M == N. Any connection that fails is named on stderr.
"""

import asyncio
import resource
import sys

REQUEST = b"GET / HTTP/1.1\r\nHost: idle\r\n\r\n"


async def exchange(reader, writer):
    writer.write(REQUEST)
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    status = head.split(b"\r\n", 1)[0]
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    await reader.readexactly(length)
    return b" 200 " in status


async def main(host, port, n):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, n + 1024)
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    gate = asyncio.Semaphore(256)

    async def one(i):
        async with gate:
            r, w = await asyncio.wait_for(asyncio.open_connection(host, port), 30)
            if not await asyncio.wait_for(exchange(r, w), 30):
                raise RuntimeError(f"connection {i}: not 200")
            return r, w

    results = await asyncio.gather(*(one(i) for i in range(n)), return_exceptions=True)
    conns = [c for c in results if not isinstance(c, BaseException)]
    for e in [e for e in results if isinstance(e, BaseException)][:5]:
        print(f"failed: {e!r}", file=sys.stderr)
    print(f"held {len(conns)}", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)

    async def again(c):
        try:
            return await asyncio.wait_for(exchange(*c), 30)
        except Exception as e:  # noqa: BLE001 -- counted and named
            print(f"again: {e!r}", file=sys.stderr)
            return False

    ok = sum(await asyncio.gather(*(again(c) for c in conns)))
    print(f"answered {ok}", flush=True)
    for _, w in conns:
        w.close()
    return 0 if ok == n else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))))
