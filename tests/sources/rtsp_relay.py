"""A small RTSP server for tests: ffmpeg packetises a file into RTP, this serves it over RTSP/TCP.

ffmpeg can push to an RTSP server but cannot be one for players, so the test plays the server's
part of the protocol (OPTIONS, DESCRIBE, SETUP, PLAY) itself and relays ffmpeg's RTP packets to each
client, interleaved on the RTSP connection. It answers only TCP transport and records what each
SETUP asked for, so a test can check which transport the client requested, and it counts the clients
that connect.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import threading
import time
from pathlib import Path


class RtspRelay:
    def __init__(self, ffmpeg: str, media: Path, port: int, workdir: Path) -> None:
        self.ffmpeg, self.media, self.port, self.workdir = ffmpeg, media, port, workdir
        self.setups: list[str] = []  # Transport headers of every SETUP received
        self.connections = 0  # TCP connections accepted, one per RTSP client
        self.frozen = False  # True: keep connections open but stop sending packets
        self._clients: list[socket.socket] = []
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._listener: socket.socket | None = None
        self._rtp: socket.socket | None = None
        self._sdp = ""

    @property
    def url(self) -> str:
        return f"rtsp://127.0.0.1:{self.port}/cam"

    def start(self) -> None:
        self.frozen = False
        self._rtp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._rtp.bind(("127.0.0.1", 0))
        rtp_port = self._rtp.getsockname()[1]
        sdp_path = self.workdir / f"relay-{rtp_port}.sdp"
        command = [self.ffmpeg, "-hide_banner", "-loglevel", "error", "-re", "-stream_loop", "-1"]
        command += ["-i", str(self.media), "-c", "copy", "-an", "-f", "rtp", "-rtpflags", "skip_rtcp"]
        command += ["-sdp_file", str(sdp_path), f"rtp://127.0.0.1:{rtp_port}"]
        self._process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + 15
        while not (sdp_path.exists() and "m=video" in sdp_path.read_text()):
            assert time.monotonic() < deadline, "ffmpeg wrote no SDP"
            time.sleep(0.05)
        self._sdp = _for_rtsp(sdp_path.read_text())
        self._listener = socket.create_server(("127.0.0.1", self.port))
        threading.Thread(target=self._accept, args=(self._listener,), daemon=True).start()
        threading.Thread(target=self._relay, args=(self._rtp,), daemon=True).start()

    def stop(self) -> None:
        """Everything goes away at once, like a camera losing power."""
        for sock in [self._listener, self._rtp, *self._clients]:
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
        self._clients.clear()
        self._listener = self._rtp = None
        if self._process is not None:
            self._process.kill()
            self._process.wait(10)
            self._process = None

    def _accept(self, listener: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while True:
                client, _ = listener.accept()
                self.connections += 1
                threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _relay(self, rtp: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while True:
                packet = rtp.recv(65536)
                if self.frozen:
                    continue
                frame = b"$\x00" + len(packet).to_bytes(2, "big") + packet
                with self._lock:
                    for client in list(self._clients):
                        try:
                            client.sendall(frame)
                        except OSError:  # the client left, or stop() closed it and cleared the list meanwhile
                            with contextlib.suppress(ValueError):
                                self._clients.remove(client)

    def _serve(self, client: socket.socket) -> None:
        buffer = b""
        with contextlib.suppress(OSError):
            while True:
                while buffer.startswith(b"$") and len(buffer) >= 4:  # interleaved RTCP from the player
                    size = 4 + int.from_bytes(buffer[2:4], "big")
                    if len(buffer) < size:
                        break
                    buffer = buffer[size:]
                if b"\r\n\r\n" not in buffer or buffer.startswith(b"$"):
                    chunk = client.recv(65536)
                    if not chunk:
                        return
                    buffer += chunk
                    continue
                head, buffer = buffer.split(b"\r\n\r\n", 1)
                self._answer(client, head.decode("latin-1"))

    def _answer(self, client: socket.socket, request: str) -> None:
        lines = request.split("\r\n")
        method = lines[0].split(" ")[0]
        headers = {key.strip().lower(): value.strip() for key, _, value in (line.partition(":") for line in lines[1:])}
        reply = [f"CSeq: {headers.get('cseq', '0')}"]
        body = ""
        status = "200 OK"
        if method == "OPTIONS":
            reply.append("Public: OPTIONS, DESCRIBE, SETUP, PLAY, TEARDOWN, GET_PARAMETER")
        elif method == "DESCRIBE":
            body = self._sdp
            reply += [f"Content-Base: {self.url}/", "Content-Type: application/sdp", f"Content-Length: {len(body)}"]
        elif method == "SETUP":
            transport = headers.get("transport", "")
            self.setups.append(transport)
            if "TCP" not in transport:
                status = "461 Unsupported Transport"
            else:
                reply += ["Transport: RTP/AVP/TCP;unicast;interleaved=0-1", "Session: 4711;timeout=60"]
        elif method == "PLAY":
            reply.append("Session: 4711")
        head = f"RTSP/1.0 {status}\r\n" + "".join(f"{line}\r\n" for line in reply) + "\r\n"
        client.sendall((head + body).encode())
        if method == "PLAY":
            with self._lock:
                self._clients.append(client)


def _for_rtsp(sdp: str) -> str:
    """ffmpeg's SDP for plain RTP, made into one an RTSP server hands out (port 0, a control URL)."""
    lines = []
    for line in sdp.strip().splitlines():
        if line.startswith("m=video"):
            line = "m=video 0 " + line.split(" ", 2)[2]
            lines += [line, "a=control:trackID=0"]
        elif line.startswith("c="):
            lines.append("c=IN IP4 0.0.0.0")
        else:
            lines.append(line)
    return "\r\n".join(lines) + "\r\n"
