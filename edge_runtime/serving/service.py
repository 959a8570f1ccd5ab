"""The answering half of the daemon: the served models, their queues, and the HTTP endpoint in front of them.

Models come from the daemon's model pool, so a model a pipeline already runs with the same settings is
loaded once. Whether a model's requests are joined into batches, or run side by side on its async
runner, is decided by `batch_choice` (only where sound, and by default only where it pays on this box);
the choice is logged and shown in the model's metadata.
"""

from __future__ import annotations

import logging
import socket
import ssl
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edge_runtime.config.serving import ServedModelConfig, ServeSettings
from edge_runtime.errors import ConfigError
from edge_runtime.mqtt.connection import MqttConnection
from edge_runtime.mqtt.topics import Topics
from edge_runtime.pipeline.build import decoder_of
from edge_runtime.placement.model_pool import ModelPool
from edge_runtime.serving.batch_choice import BatchChoices
from edge_runtime.serving.batching import Batching, InferenceQueue
from edge_runtime.serving.http import HttpLimits, build_app
from edge_runtime.serving.metrics import ModelMetrics, UnknownModelRequests
from edge_runtime.serving.mqtt import MqttRequests
from edge_runtime.serving.served import ServedModel

if TYPE_CHECKING:
    from edge_runtime.serving.connections import ConnectionLimits

__all__ = ["Serving"]

log = logging.getLogger(__name__)


class Serving:
    def __init__(
        self,
        settings: ServeSettings,
        device_id: str,
        pool: ModelPool,
        config_file: Path,
        connection: MqttConnection | None = None,
        topics: Topics | None = None,
    ) -> None:
        self.settings = settings
        self.device_id = device_id
        self.pool = pool
        self.config_file = config_file
        self.connection = connection
        self.topics = topics
        self.models: dict[str, ServedModel] = {}
        self.choices = BatchChoices(pool.state_dir)
        self.mqtt: MqttRequests | None = None
        self.unknown_models = UnknownModelRequests()
        self.connections: ConnectionLimits | None = None  # the HTTP endpoint's, once started
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._socket: socket.socket | None = None

    @property
    def port(self) -> int | None:
        return None if self._socket is None else int(self._socket.getsockname()[1])

    def start(self) -> None:
        for config in self.settings.models:
            self.models[config.name] = self._serve(config)
        if self.settings.http.enabled:
            self._start_http()
        if self.settings.mqtt and self.connection is not None and self.topics is not None:
            self.mqtt = MqttRequests(
                self.connection, self.topics, self.models, share_group=self.settings.share_group,
                unknown=self.unknown_models,
            )  # fmt: skip
            self.mqtt.start()
            log.info("answering requests on %s", self.topics.infer("<model>"))

    def stop(self, timeout: float = 5.0) -> None:
        if self.mqtt is not None:
            self.mqtt.stop()
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout)
        for name, served in self.models.items():
            served.queue.close()
            self.pool.release(f"serve:{name}")
        self.models.clear()

    def report(self) -> dict[str, Any]:
        return {name: served.metrics.snapshot() for name, served in self.models.items()}

    def take_release(self, package: str, *, record_release: bool = True, downgrade_to: int | None = None) -> list[str]:
        """Serve the release of `package` the store marks active (a rollout switched to it, or back): each
        served model of the package loads again, and takes the requests from then on, while its old queue
        answers what it holds. `record_release` and `downgrade_to` go to the model pool, as for a rollout's
        own loads. Returns the served models that switched."""
        switched = []
        for config in self.settings.models:
            served = self.models.get(config.name)
            if served is None or served.model.package.name != package:
                continue
            user = f"serve:{config.name}"
            pinned = {"record_release": record_release, "downgrade_to": downgrade_to}
            self.models[config.name] = self._serve(config, f"{user}:next", served.metrics, pinned)
            served.queue.close()
            self.pool.release(user)
            self.pool.rename(f"{user}:next", user)
            switched.append(config.name)
        return switched

    def _serve(
        self,
        config: ServedModelConfig,
        user: str | None = None,
        metrics: ModelMetrics | None = None,
        pinned: dict[str, Any] | None = None,
    ) -> ServedModel:
        wanted = config.batching.max_batch_size
        user = user or f"serve:{config.name}"
        load = {"unpaced": True, "share_any_pace": True, **(pinned or {})}
        # Single requests run on the model as exported: a freed batch dimension makes a backend choose kernels
        # for any shape, slower for the one shape singles have (MobileNetV2 on OpenVINO's CPU: 9.4 against
        # 8.3 ms of CPU per inference). The model with its batch freed is loaded beside it, measured against
        # it, and kept only where batches win.
        model = self.pool.acquire(user, config, self.config_file, **load)
        batched = None
        if wanted > 1:
            batched_user = f"{user}:batched"
            batched = self.pool.acquire(batched_user, config, self.config_file, options={"dynamic_batch": True}, **load)
        choice = self.choices.choose(batched or model, wanted, config.batching.batch_when, single=model)
        if batched is not None and choice.max_batch_size > 1:
            self.pool.release(user)
            self.pool.rename(batched_user, user)
            model = batched
        elif batched is not None:
            self.pool.release(batched_user)
        batching = Batching(choice.max_batch_size, config.batching.max_queue_delay_ms, config.batching.max_queue_size,
                            config.batching.timeout_ms)  # fmt: skip
        metrics = metrics or ModelMetrics()
        queue = InferenceQueue(config.name, model, batching, metrics)
        log.info("serving %s: %s; %s", config.name, model.label, choice.reason)
        return ServedModel(config.name, model, queue, metrics, decoder_of(model), self.device_id, choice,
                           max_image_pixels=self.settings.max_image_pixels)  # fmt: skip

    def _start_http(self) -> None:
        import uvicorn

        from edge_runtime.serving.connections import ConnectionLimits, guarded_protocol

        http = self.settings.http
        token = http.token.get_secret_value() if http.token is not None else None
        limits = HttpLimits(http.max_body_bytes, http.read_timeout_s, http.max_bytes_in_flight)
        app = build_app(self.models, token, limits, self.unknown_models)
        family = socket.AF_INET6 if ":" in http.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((http.host, http.port))
        except OSError as error:  # another program holds the port: the config checks cannot know that
            sock.close()
            raise ConfigError(f"serve.http.port: cannot listen on {http.host}:{http.port}: {error.strerror}") from None
        self._socket = sock
        tls: dict[str, Any] = {}
        if http.tls_cert_file is not None and http.tls_key_file is not None:
            tls = {"ssl_certfile": str(http.tls_cert_file), "ssl_keyfile": str(http.tls_key_file)}
            tls["ssl_version"] = ssl.PROTOCOL_TLS_SERVER
        self.connections = ConnectionLimits(http.max_connections, http.header_timeout_s)
        config = uvicorn.Config(app, http=guarded_protocol(self.connections), log_level="warning", access_log=False,
                                lifespan="off", timeout_keep_alive=5, **tls)  # fmt: skip
        self._server = uvicorn.Server(config)
        started = threading.Event()
        self._thread = threading.Thread(target=self._run_http, args=(sock, started.set), name="http", daemon=True)
        self._thread.start()
        if not started.wait(10):
            raise RuntimeError(f"the HTTP endpoint did not start on {http.host}:{self.port}")
        scheme = "https" if tls else "http"
        log.info("serving %s on %s://%s:%s", ", ".join(self.models), scheme, http.host, self.port)

    def _run_http(self, sock: socket.socket, on_started: Callable[[], None]) -> None:
        import asyncio

        from edge_runtime.serving.connections import quiet_loop_errors

        async def serve() -> None:
            quiet_loop_errors(asyncio.get_running_loop())
            task = asyncio.ensure_future(self._server.serve(sockets=[sock]))
            while not self._server.started and not task.done():
                await asyncio.sleep(0.01)
            on_started()
            await task

        asyncio.run(serve())
