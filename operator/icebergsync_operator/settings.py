"""Operator settings: every one from a command-line flag, defaulting to an ``ICEBERGSYNC_*`` variable.

Durations accept the spec's notation (``30s``, ``5m``, ``1h30m``) or plain seconds.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from icebergsync.units import parse_duration, parse_size
from icebergsync_operator.catalog_memory import BYTES_CHARGED, SMALL_READ
from icebergsync_operator.catalog_scope import CatalogScope
from icebergsync_operator.endpoints import EndpointError, parse_allow_list

DEFAULT_IMAGE = "ghcr.io/icebergsync/icebergsync:0.1.0"
# Seconds a reconcile may take beyond its catalog read (and its wait for one) before liveness counts it stuck.
RECONCILE_MARGIN = 60.0
DEFAULT_SPARK_VERSION = "4.0.1"
ANY = "*"  #: in allowedImages or allowedServiceAccounts: any image / service account
# spark.conf keys a tenant may set by default: tuning of memory use, parallelism, shuffle, SQL and
# Arrow batches, timeouts. None loads code, sets a JVM or Python option, chooses an image, a volume,
# a Secret, an identity or an endpoint, or adds pod resources outside the caps (memory overhead,
# dynamic allocation, core requests are left to the admin to open).
DEFAULT_ALLOWED_SPARK_CONF = (
    "spark.memory.fraction", "spark.memory.storageFraction", "spark.driver.maxResultSize",
    "spark.default.parallelism", "spark.sql.shuffle.partitions", "spark.sql.files.maxPartitionBytes",
    "spark.sql.files.openCostInBytes", "spark.sql.adaptive.enabled", "spark.sql.adaptive.coalescePartitions.enabled",
    "spark.sql.adaptive.advisoryPartitionSizeInBytes", "spark.sql.adaptive.skewJoin.enabled",
    "spark.sql.autoBroadcastJoinThreshold", "spark.sql.broadcastTimeout", "spark.sql.session.timeZone",
    "spark.sql.ansi.enabled", "spark.sql.caseSensitive", "spark.sql.execution.arrow.maxRecordsPerBatch",
    "spark.shuffle.compress", "spark.shuffle.spill.compress", "spark.shuffle.file.buffer",
    "spark.reducer.maxSizeInFlight", "spark.io.compression.codec", "spark.rdd.compress",
    "spark.kryoserializer.buffer.max", "spark.network.timeout", "spark.executor.heartbeatInterval",
    "spark.task.maxFailures", "spark.locality.wait", "spark.python.worker.reuse", "spark.python.worker.memory",
)


@dataclass(frozen=True)
class OperatorSettings:
    """What the operator watches and how it paces launches, retries and status."""

    namespaces: tuple[str, ...] = ()  #: empty: all namespaces (cluster-wide)
    default_image: str = DEFAULT_IMAGE  #: image of SparkApplications whose spec.spark.image is unset
    default_service_account: str | None = None  #: driver service account when spec.spark.serviceAccount is unset
    spark_version: str = DEFAULT_SPARK_VERSION  #: SparkApplication spec.sparkVersion
    timer_interval: float = 30.0  #: seconds between status refreshes of each sync
    backoff_base: float = 10.0  #: first relaunch delay after a failure, doubled per consecutive failure
    backoff_cap: float = 600.0  #: longest relaunch delay
    stall_after_failures: int = 5  #: consecutive failures that set Stalled (relaunches go on at the cap)
    stall_threshold: float = 300.0  #: minimum commit silence of a running job before it counts as Degraded
    metrics_port: int = 9090  #: Prometheus endpoint port; 0 disables it
    metrics_address: str = "127.0.0.1"  #: loopback unless told (the chart binds the pod IP)
    liveness_endpoint: str = "http://127.0.0.1:8080/healthz"  #: kopf liveness probe URL; empty disables it
    peering_name: str = "icebergsync"  #: KopfPeering / ClusterKopfPeering object shared by replicas
    standalone: bool = False  #: no peering: only for a single replica or development
    create_peering: bool = True  #: create missing peering objects at once; False: first wait for the chart's
    priority: int | None = None  #: peering priority; unset: older replicas outrank newer ones
    catalog_timeout: float = 10.0  #: seconds one catalog read (every connection, request and file of it) may take
    catalog_max_bytes: int = 4 * 1024**2  #: largest catalog answer or metadata file, after decompression
    catalog_read_memory: int = 192 * 1024**2  #: memory all catalog reads in flight may take (see catalog_memory)
    max_catalog_reads: int = 16  #: catalog reads in flight at once (running or stuck), in all
    max_namespace_catalog_reads: int = 2  #: catalog reads in flight at once for one namespace
    max_stuck_catalog_reads: int = 4  #: abandoned catalog reads a namespace may have before no new one starts
    reconcile_stuck_after: float = 300.0  #: a reconcile running this long fails the liveness probe
    allowed_catalog_uris: tuple[str, ...] = ()  #: endpoints (and paths under them) the operator may connect to;
    #: empty: only ClusterIcebergCatalogs, anywhere
    allow_local_catalogs: bool = False  #: open sqlite: catalogs and local metadata files (never in a cluster)
    allowed_images: tuple[str, ...] = ()  #: prefixes spec.spark.image may start with besides default_image; "*": any
    allowed_service_accounts: tuple[str, ...] = ()  #: spec.spark.serviceAccount besides the default; "*": any
    allowed_spark_conf: tuple[str, ...] = DEFAULT_ALLOWED_SPARK_CONF  #: patterns every spec.spark.conf key must match
    allowed_priority_classes: tuple[str, ...] = ()  #: spec.spark.*.priorityClassName values; "*": any
    allowed_tolerations: tuple[str, ...] = ()  #: patterns of the taint keys spec.spark.*.tolerations may name
    allowed_pod_labels: tuple[str, ...] = ()  #: patterns every spec.spark.*.labels key must match
    allowed_pod_annotations: tuple[str, ...] = ()  #: patterns every spec.spark.*.annotations key must match
    max_executors: int = 8  #: executor instances of one sync; 0: no cap
    max_cores: int = 16  #: cores of one sync, driver and executors together; 0: no cap
    max_memory: int = 64 * 1024**3  #: bytes of memory of one sync, driver and executors together; 0: no cap
    allow_transform: bool = False  #: spec.transform (Spark SQL, which can call Java methods) may be set
    allow_inline_catalogs: bool = False  #: accept spec.table.catalog (else only spec.table.catalogRef)
    catalog_secrets_namespace: str = ""  #: where ClusterIcebergCatalog secretRefs live (empty: none can be read)

    @property
    def clusterwide(self) -> bool:
        return not self.namespaces

    def catalog_scope(self, admin_declared: bool) -> CatalogScope:
        """Where the operator may go for a catalog a tenant declared, or (``admin_declared``) a
        ClusterIcebergCatalog."""
        return CatalogScope(self.allowed_catalog_uris, admin_declared, self.allow_local_catalogs)

    def retry_delay(self, consecutive_failures: int) -> float:
        """Seconds to wait before relaunching after the given number of consecutive failures."""
        exponent = max(consecutive_failures - 1, 0)
        return min(self.backoff_cap, self.backoff_base * 2 ** min(exponent, 32))

    def peering_priority(self, started_at: float | None = None) -> int:
        """The configured priority, or one that makes the longest-running replica the active one."""
        if self.priority is not None:
            return self.priority
        return -int((time.time() if started_at is None else started_at) * 1000)


def _seconds(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        try:
            return parse_duration(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None


def _bytes(text: str) -> int:
    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _list(text: str) -> tuple[str, ...]:
    return tuple(name.strip() for name in text.split(",") if name.strip())


def _flag(text: str) -> bool:
    return text.strip().lower() in ("1", "true", "yes", "on")


def build_parser(environ: Mapping[str, str]) -> argparse.ArgumentParser:
    def env(name: str, default: object) -> object:
        return environ.get(f"ICEBERGSYNC_{name}", default)

    defaults = OperatorSettings()
    parser = argparse.ArgumentParser(
        prog="icebergsync-operator",
        description="Run IcebergSync resources as Spark Operator SparkApplications.",
        epilog="Every flag defaults to the ICEBERGSYNC_<FLAG> environment variable (e.g. ICEBERGSYNC_NAMESPACES).",
    )
    add = parser.add_argument

    def add_list(flag: str, help: str) -> None:
        """A comma-separated list flag, empty by default, read from ``ICEBERGSYNC_<FLAG>`` when unset."""
        add(flag, type=_list, default=_list(str(env(flag[2:].upper().replace("-", "_"), ""))), help=help)

    add_list("--namespaces", "comma-separated namespaces to watch (default: all)")
    add("--default-image", default=env("DEFAULT_IMAGE", defaults.default_image))
    add("--default-service-account", default=env("DEFAULT_SERVICE_ACCOUNT", None) or None)
    add("--spark-version", default=env("SPARK_VERSION", defaults.spark_version))
    add("--timer-interval", type=_seconds, default=_seconds(str(env("TIMER_INTERVAL", defaults.timer_interval))))
    add("--backoff-base", type=_seconds, default=_seconds(str(env("BACKOFF_BASE", defaults.backoff_base))))
    add("--backoff-cap", type=_seconds, default=_seconds(str(env("BACKOFF_CAP", defaults.backoff_cap))))
    add("--stall-after-failures", type=int, default=int(str(env("STALL_AFTER_FAILURES", defaults.stall_after_failures))))
    add("--stall-threshold", type=_seconds, default=_seconds(str(env("STALL_THRESHOLD", defaults.stall_threshold))))
    add("--metrics-port", type=int, default=int(str(env("METRICS_PORT", defaults.metrics_port))))
    add("--metrics-address", default=env("METRICS_ADDRESS", defaults.metrics_address))
    add("--liveness-endpoint", default=env("LIVENESS_ENDPOINT", defaults.liveness_endpoint))
    add("--peering-name", default=env("PEERING_NAME", defaults.peering_name))
    add("--standalone", action="store_true", default=_flag(str(env("STANDALONE", ""))))
    add("--create-peering", action=argparse.BooleanOptionalAction,
        default=_flag(str(env("CREATE_PEERING", "true"))),
        help="create the peering object(s) when missing (default); --no-create-peering first waits up to 60 s "
             "for them, as the Helm chart creates them after the operator's Deployment")
    priority = env("PRIORITY", "")
    add("--priority", type=int, default=int(str(priority)) if str(priority).strip() else None)
    add("--catalog-timeout", type=_seconds, default=_seconds(str(env("CATALOG_TIMEOUT", defaults.catalog_timeout))),
        help="total time of one catalog read of the operator: every connection, token exchange, request, "
             "query and metadata file of it")
    add("--catalog-max-bytes", type=_bytes, default=_bytes(str(env("CATALOG_MAX_BYTES", defaults.catalog_max_bytes))),
        help="largest catalog answer or metadata file the operator reads, after decompression (default 4Mi)")
    add("--catalog-read-memory", type=_bytes,
        default=_bytes(str(env("CATALOG_READ_MEMORY", defaults.catalog_read_memory))),
        help=f"memory all catalog reads in flight may take, each buffered byte charged {BYTES_CHARGED} bytes (its "
             "copies and parse); a read that would exceed it fails and backs off (default 192Mi)")
    add("--max-catalog-reads", type=int, default=int(str(env("MAX_CATALOG_READS", defaults.max_catalog_reads))),
        help="catalog reads in flight at once, running or stuck; a read waits up to --catalog-timeout for a slot, "
             "then backs off (default 16)")
    add("--max-namespace-catalog-reads", type=int,
        default=int(str(env("MAX_NAMESPACE_CATALOG_READS", defaults.max_namespace_catalog_reads))),
        help="catalog reads in flight at once for one namespace: eight namespaces are needed to take every "
             "slot (default 2)")
    add("--max-stuck-catalog-reads", type=int,
        default=int(str(env("MAX_STUCK_CATALOG_READS", defaults.max_stuck_catalog_reads))),
        help="catalog reads of one namespace left running past their deadline before no new one starts there")
    add("--reconcile-stuck-after", type=_seconds,
        default=_seconds(str(env("RECONCILE_STUCK_AFTER", defaults.reconcile_stuck_after))),
        help="a reconcile still running after this long makes the liveness probe fail (default 5m)")
    add_list("--allowed-catalog-uris",
             "comma-separated endpoints (scheme://host[:port][/path]) of the catalogs and their OAuth2 and S3 "
             "endpoints the operator may connect to, each allowing that host and port and paths under it; empty "
             "(the default): no IcebergCatalog or inline catalog is contacted, ClusterIcebergCatalogs anywhere")
    add("--allow-local-catalogs", action=argparse.BooleanOptionalAction,
        default=_flag(str(env("ALLOW_LOCAL_CATALOGS", ""))),
        help="open sqlite: catalogs and local metadata files, for an operator run on a workstation against a "
             "local lake; refused in a cluster (default: refused)")
    add_list("--allowed-images",
             "comma-separated prefixes spec.spark.image may start with besides --default-image; * allows any "
             "(default: only --default-image)")
    add_list("--allowed-service-accounts",
             "comma-separated service accounts spec.spark.serviceAccount may name besides "
             "--default-service-account; * allows any (default: only --default-service-account)")
    add("--allowed-spark-conf", type=_list,
        default=_list(str(env("ALLOWED_SPARK_CONF", ",".join(defaults.allowed_spark_conf)))),
        help="comma-separated patterns every spec.spark.conf key must match; * allows any (default: named "
             "tuning keys of memory, parallelism, shuffle and SQL, see docs/security.md)")
    add_list("--allowed-priority-classes",
             "comma-separated PriorityClasses spec.spark.driver/executor.priorityClassName may name; * allows any "
             "(default: none, the cluster's default priority)")
    add_list("--allowed-tolerations",
             "comma-separated patterns of the taint keys spec.spark.driver/executor.tolerations may tolerate; * "
             "allows any key, and only * a toleration without a key, which tolerates every taint (default: none)")
    add_list("--allowed-pod-labels",
             "comma-separated patterns every spec.spark.driver/executor.labels key must match (default: none); the "
             "operator's and Spark's own labels are never allowed")
    add_list("--allowed-pod-annotations",
             "comma-separated patterns every spec.spark.driver/executor.annotations key must match (default: none)")
    add("--max-executors", type=int, default=int(str(env("MAX_EXECUTORS", defaults.max_executors))),
        help="executor instances one sync may ask for; 0: no cap (default 8)")
    add("--max-cores", type=int, default=int(str(env("MAX_CORES", defaults.max_cores))),
        help="cores one sync may ask for, driver and executors together; 0: no cap (default 16)")
    add("--max-memory", type=_bytes, default=_bytes(str(env("MAX_MEMORY", defaults.max_memory))),
        help="memory one sync may ask for, driver and executors together (e.g. 64Gi); 0: no cap (default 64Gi)")
    add("--allow-transform", action=argparse.BooleanOptionalAction, default=_flag(str(env("ALLOW_TRANSFORM", ""))),
        help="let syncs set spec.transform: Spark SQL in the job's JVMs, which can call Java methods and read "
             "local files, i.e. run code as the job (default: refused)")
    add("--allow-inline-catalogs", action=argparse.BooleanOptionalAction,
        default=_flag(str(env("ALLOW_INLINE_CATALOGS", ""))),
        help="accept syncs that declare their catalog inline (spec.table.catalog); default: only catalog resources "
             "(spec.table.catalogRef), see docs/catalogs.md")
    add("--catalog-secrets-namespace", default=env("CATALOG_SECRETS_NAMESPACE", ""),
        help="the namespace holding the Secrets ClusterIcebergCatalogs name (the chart: its own namespace)")
    add("--log-level", default=env("LOG_LEVEL", "INFO"))
    return parser


def _check_catalog_memory(args: argparse.Namespace) -> None:
    """The read slots and the memory budget must admit one answer of --catalog-max-bytes."""
    if not 1 <= args.max_namespace_catalog_reads <= args.max_catalog_reads:
        raise SystemExit("--max-namespace-catalog-reads must be at least 1 and at most --max-catalog-reads")
    reserve = args.max_catalog_reads * SMALL_READ * BYTES_CHARGED
    largest = max(args.catalog_max_bytes - SMALL_READ, 0) * BYTES_CHARGED
    if args.catalog_read_memory < reserve + largest:
        raise SystemExit(f"--catalog-read-memory must be at least {reserve + largest} bytes: {BYTES_CHARGED} per byte "
                         f"of one --catalog-max-bytes answer, plus {SMALL_READ * BYTES_CHARGED} reserved for each "
                         "of --max-catalog-reads")


def parse_settings(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None
                   ) -> tuple[OperatorSettings, str]:
    """Settings and log level from the command line and environment."""
    args = build_parser(os.environ if environ is None else environ).parse_args(argv)
    if args.backoff_base <= 0 or args.backoff_cap < args.backoff_base:
        raise SystemExit("--backoff-base must be > 0 and --backoff-cap at least --backoff-base")
    if args.catalog_timeout <= 0 or args.catalog_max_bytes <= 0 or args.max_stuck_catalog_reads < 1:
        raise SystemExit("--catalog-timeout and --catalog-max-bytes must be > 0, --max-stuck-catalog-reads at least 1")
    _check_catalog_memory(args)
    if args.reconcile_stuck_after < 2 * args.catalog_timeout + RECONCILE_MARGIN:
        raise SystemExit(f"--reconcile-stuck-after must be at least twice --catalog-timeout + {RECONCILE_MARGIN:g}s: "
                         "a reconcile waiting for a catalog read and on a tenant's catalog must never fail the "
                         "liveness probe")
    try:
        parse_allow_list(args.allowed_catalog_uris)
    except EndpointError as error:
        raise SystemExit(f"--allowed-catalog-uris: {error}") from None
    if min(args.max_executors, args.max_cores, args.max_memory) < 0:
        raise SystemExit("--max-executors, --max-cores and --max-memory must be >= 0 (0: no cap)")
    if args.timer_interval <= 0 or args.stall_after_failures < 1:
        raise SystemExit("--timer-interval must be > 0 and --stall-after-failures at least 1")
    settings = OperatorSettings(
        namespaces=args.namespaces,
        default_image=args.default_image,
        default_service_account=args.default_service_account,
        spark_version=args.spark_version,
        timer_interval=args.timer_interval,
        backoff_base=args.backoff_base,
        backoff_cap=args.backoff_cap,
        stall_after_failures=args.stall_after_failures,
        stall_threshold=args.stall_threshold,
        metrics_port=args.metrics_port,
        metrics_address=args.metrics_address,
        liveness_endpoint=args.liveness_endpoint,
        peering_name=args.peering_name,
        standalone=args.standalone,
        create_peering=args.create_peering,
        priority=args.priority,
        catalog_timeout=args.catalog_timeout,
        catalog_max_bytes=args.catalog_max_bytes,
        catalog_read_memory=args.catalog_read_memory,
        max_catalog_reads=args.max_catalog_reads,
        max_namespace_catalog_reads=args.max_namespace_catalog_reads,
        max_stuck_catalog_reads=args.max_stuck_catalog_reads,
        reconcile_stuck_after=args.reconcile_stuck_after,
        allowed_catalog_uris=args.allowed_catalog_uris,
        allow_local_catalogs=args.allow_local_catalogs,
        allowed_images=args.allowed_images,
        allowed_service_accounts=args.allowed_service_accounts,
        allowed_spark_conf=args.allowed_spark_conf,
        allowed_priority_classes=args.allowed_priority_classes,
        allowed_tolerations=args.allowed_tolerations,
        allowed_pod_labels=args.allowed_pod_labels,
        allowed_pod_annotations=args.allowed_pod_annotations,
        max_executors=args.max_executors,
        max_cores=args.max_cores,
        max_memory=args.max_memory,
        allow_transform=args.allow_transform,
        allow_inline_catalogs=args.allow_inline_catalogs,
        catalog_secrets_namespace=args.catalog_secrets_namespace,
    )
    return settings, args.log_level
