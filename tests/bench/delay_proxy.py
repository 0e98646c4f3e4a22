"""tests/bench/delay_proxy.py LISTEN_PORT TARGET_PORT DELAY_MS — a TCP proxy on 127.0.0.1
that holds every chunk it forwards for DELAY_MS / 2 in each direction, so a request and
its answer take DELAY_MS longer: a far object store, where `tc netem` is not available
(this machine's kernel has no sch_netem). Order within a connection is kept; bandwidth is
not limited. Runs until killed; prints "ready" when it listens."""
import asyncio
import sys

LISTEN, TARGET, DELAY = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]) / 2000.0


async def pipe(reader, writer):
    loop = asyncio.get_running_loop()
    queue = asyncio.Queue()

    async def send():
        while True:
            due, data = await queue.get()
            if data is None:
                break
            wait = due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            writer.write(data)
            await writer.drain()
        writer.close()

    sender = asyncio.create_task(send())
    try:
        while True:
            data = await reader.read(1 << 16)
            if not data:
                break
            await queue.put((loop.time() + DELAY, data))
    except ConnectionError:
        pass
    await queue.put((0, None))
    try:
        await sender
    except ConnectionError:
        pass


async def handle(client_r, client_w):
    try:
        server_r, server_w = await asyncio.open_connection("127.0.0.1", TARGET)
    except OSError:
        client_w.close()
        return
    await asyncio.gather(pipe(client_r, server_w), pipe(server_r, client_w))


async def main():
    server = await asyncio.start_server(handle, "127.0.0.1", LISTEN)
    print("ready", flush=True)
    async with server:
        await server.serve_forever()


asyncio.run(main())
