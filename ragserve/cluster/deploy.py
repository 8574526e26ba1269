"""The Ray Serve application from Settings: `replicas` engine replicas behind `api_replicas`
API replicas, routed by prefix (or by Ray Serve's power of two choices), on a local Ray
instance or the cluster at `ray_address`."""

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import ray
from fastapi import FastAPI
from ray import serve
from ray.serve.config import HTTPOptions, RequestRouterConfig
from ray.serve.deployment import Application
from ray.serve.handle import DeploymentHandle

from ragserve.cluster.remote_engine import RemoteEngine
from ragserve.cluster.replica import EngineReplica
from ragserve.cluster.router import PrefixAwareRouter
from ragserve.cluster.shared_state import (
    NAMESPACE,
    SharedLimiter,
    shared_state,
    start_shared_state,
    stop_shared_state,
)
from ragserve.server.app import build_app
from ragserve.settings import Settings

APP_NAME = "ragserve"


@serve.ingress()
class Api:
    """An API replica: the whole HTTP server over the engine replicas."""

    async def __init__(self, fields: dict[str, object], engine: DeploymentHandle) -> None:
        self.settings = Settings(**fields)
        shared = shared_state()
        self.engine = await RemoteEngine.connect(self.settings.model, engine, shared)
        self.limiter = SharedLimiter(shared)

    def __serve_build_asgi_app__(self) -> FastAPI:
        return build_app(self.settings, self.engine, limiter=self.limiter)


def engine_threads(settings: Settings) -> int:
    """Cores per engine replica: as set, or the cluster's CPUs shared out evenly."""
    if settings.num_threads:
        return settings.num_threads
    cpus = int(ray.cluster_resources().get("CPU", os.cpu_count() or 1))
    return max(1, cpus // settings.replicas)


def application(settings: Settings) -> Application:
    threads = engine_threads(settings)
    router = None
    if settings.routing == "prefix":
        router = RequestRouterConfig(
            request_router_class=PrefixAwareRouter,
            request_router_kwargs={"balance_tolerance": settings.routing_balance_tolerance},
        )
    engine = serve.deployment(
        EngineReplica,
        name="engine",
        num_replicas=settings.replicas,
        ray_actor_options={"num_cpus": threads},
        # The engine's own queue limit refuses (503) what it cannot take; Ray Serve must not
        # queue in front of it.
        max_ongoing_requests=settings.max_num_seqs + settings.max_queued_requests,
        **({"request_router_config": router} if router else {}),
    )
    # API replicas run on this node, where data_dir (the key file, a SQLite store) is; engine
    # replicas wherever the cluster has CPUs.
    this_node = f"node:{ray.util.get_node_ip_address()}"
    api = serve.deployment(
        Api,
        name="api",
        num_replicas=settings.api_replicas,
        ray_actor_options={"num_cpus": 0, "resources": {this_node: 0.001}},
        max_ongoing_requests=10_000,
    )
    # Settings travel as their values: every replica builds its own.
    fields = settings.model_dump()
    return api.bind(fields, engine.bind({**fields, "num_threads": threads}))


def with_absolute_paths(settings: Settings) -> Settings:
    """Replicas do not run in this directory: relative paths are made absolute here."""
    update: dict[str, object] = {"data_dir": settings.data_dir.resolve()}
    if settings.store and "://" not in settings.store:
        update["store"] = str(Path(settings.store).resolve())
    if Path(settings.model).exists():
        update["model"] = str(Path(settings.model).resolve())
    return settings.model_copy(update=update)


@contextmanager
def deployed(settings: Settings) -> Iterator[str]:
    """Deploy on Ray Serve, yield the API's URL, and take it down on exit (and Ray, when
    this started it)."""
    settings = with_absolute_paths(settings)
    if settings.ray_address is None:
        # Ray Serve gives its HTTP proxy 5 s to report ready, three times, then kills it: on
        # two cores busy with other work the proxy's worker takes longer than that to start,
        # and the deployment fails. The cluster this starts, and whatever it inherits, waits
        # longer (a cluster given by address keeps its own settings).
        os.environ.setdefault("RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S", "60")
    ray.init(
        address=settings.ray_address,
        namespace=NAMESPACE,
        include_dashboard=False,
        log_to_driver=False,
    )
    try:
        start_shared_state(
            settings.max_concurrent_requests_per_user, settings.tokens_per_minute_per_user
        )
        serve.start(http_options=HTTPOptions(host=settings.host, port=settings.port))
        serve.run(application(settings), name=APP_NAME, route_prefix="/")
        yield f"http://{settings.host}:{settings.port}"
    finally:
        serve.delete(APP_NAME)
        stop_shared_state()
        if settings.ray_address is None:
            serve.shutdown()
        ray.shutdown()
