"""Container images for the one-node test cluster, written as docker-archive tarballs that
``ctr images import`` loads straight into containerd (no registry, no docker daemon).

``cluster-images``: ``pause.tar`` (the pause.c shipped inside the k8s.io/kubernetes module,
compiled static), ``coredns.tar`` and ``kubectl.tar`` (the CoreDNS and kubectl binaries built by
kube-tools.sh; the tier's network probes run kubectl in pods) and ``minio.tar`` (the MinIO server
scripts/infra/services.sh builds; the end-to-end tests run it as a pod). Each image holds one
static binary. Output is keyed by the inputs, so a re-run with nothing changed
does nothing.

Usage (called by scripts/infra/cluster.sh build)::

    images.py cluster-images --out DIR --kubernetes-module DIR --pause-image REF \\
        --coredns-image REF --coredns-bin PATH --kubectl-image REF --kubectl-bin PATH \\
        --minio-image REF --minio-bin PATH
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import subprocess
import tarfile
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class FileEntry:
    """One file of an image layer: host ``source`` stored at ``path`` (absolute in the image)."""

    source: Path
    path: str
    mode: int = 0o755


def layer_tar(entries: Iterable[FileEntry]) -> bytes:
    """An uncompressed layer tarball with the parent directories of every entry, owned by root."""
    buf = io.BytesIO()
    dirs: set[str] = set()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for entry in entries:
            parts = entry.path.strip("/").split("/")
            for depth in range(1, len(parts)):
                directory = "/".join(parts[:depth])
                if directory not in dirs:
                    dirs.add(directory)
                    info = tarfile.TarInfo(directory)
                    info.type, info.mode = tarfile.DIRTYPE, 0o755
                    tar.addfile(info)
            info = tarfile.TarInfo("/".join(parts))
            data = entry.source.read_bytes()
            info.size, info.mode = len(data), entry.mode
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def write_docker_archive(out: Path, ref: str, layers: list[bytes], config: dict[str, object]) -> None:
    """Write a docker-archive (``docker save`` format) tarball for one image, atomically."""
    diff_ids = [f"sha256:{hashlib.sha256(layer).hexdigest()}" for layer in layers]
    image_config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": config,
            "rootfs": {"type": "layers", "diff_ids": diff_ids},
            "history": [{"created_by": "scripts/infra/kube-node/images.py"} for _ in layers],
        },
        sort_keys=True,
    ).encode()
    config_name = f"{hashlib.sha256(image_config).hexdigest()}.json"
    layer_names = [f"{diff_id.removeprefix('sha256:')}/layer.tar" for diff_id in diff_ids]
    manifest = json.dumps([{"Config": config_name, "RepoTags": [ref], "Layers": layer_names}]).encode()
    tmp = out.with_name(f".{out.name}.tmp")
    with tarfile.open(tmp, mode="w") as tar:
        for name, data in [
            (config_name, image_config),
            *zip(layer_names, layers, strict=True),
            ("manifest.json", manifest),
        ]:
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    os.replace(tmp, out)


def compile_pause(kubernetes_module: Path, work: Path) -> Path:
    """Compile build/pause/linux/pause.c of the Kubernetes module as a static binary."""
    source = kubernetes_module / "build" / "pause" / "linux" / "pause.c"
    binary = work / "pause"
    subprocess.run(
        [
            "gcc",
            "-Os",
            "-static",
            "-Wall",
            "-Werror",
            "-DVERSION=v3.10-icebergsync",
            "-o",
            str(binary),
            str(source),
        ],
        check=True,
    )
    subprocess.run(["strip", str(binary)], check=True)
    return binary


def _inputs_key(*parts: bytes) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(hashlib.sha256(part).digest())
    return digest.hexdigest()[:16]


def single_binary_image(out: Path, ref: str, binary: Path, config: dict[str, object]) -> None:
    """An image whose only file is the static ``binary`` at ``/<its name>``, its entrypoint."""
    path = f"/{binary.name}"
    layers = [layer_tar([FileEntry(binary.resolve(), path)])]
    write_docker_archive(out, ref, layers, {"Entrypoint": [path], **config})


def cluster_images(args: argparse.Namespace) -> None:
    """Write pause.tar, coredns.tar, kubectl.tar and minio.tar into ``args.out`` unless current."""
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    pause_c = args.kubernetes_module / "build" / "pause" / "linux" / "pause.c"
    key = _inputs_key(
        pause_c.read_bytes(),
        args.coredns_bin.read_bytes(),
        args.kubectl_bin.read_bytes(),
        args.minio_bin.read_bytes(),
        f"{args.pause_image} {args.coredns_image} {args.kubectl_image} {args.minio_image}".encode(),
        Path(__file__).read_bytes(),
    )
    stamp = out / ".cluster-images.stamp"
    names = ("pause.tar", "coredns.tar", "kubectl.tar", "minio.tar")
    if stamp.is_file() and stamp.read_text() == key and all((out / name).is_file() for name in names):
        return
    with tempfile.TemporaryDirectory() as work:
        pause = compile_pause(args.kubernetes_module, Path(work))
        single_binary_image(out / "pause.tar", args.pause_image, pause, {"User": "65535:65535"})
    single_binary_image(out / "coredns.tar", args.coredns_image, args.coredns_bin, {})
    single_binary_image(out / "kubectl.tar", args.kubectl_image, args.kubectl_bin, {"User": "65534:65534"})
    single_binary_image(out / "minio.tar", args.minio_image, args.minio_bin, {})
    stamp.write_text(key)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    node = commands.add_parser("cluster-images", help="pause, CoreDNS, kubectl and MinIO images")
    node.add_argument("--out", type=Path, required=True)
    node.add_argument("--pause-image", required=True)
    node.add_argument("--coredns-image", required=True)
    node.add_argument("--coredns-bin", type=Path, required=True)
    node.add_argument("--kubectl-image", required=True)
    node.add_argument("--kubectl-bin", type=Path, required=True)
    node.add_argument("--minio-image", required=True)
    node.add_argument("--minio-bin", type=Path, required=True)
    node.add_argument("--kubernetes-module", type=Path, required=True)
    node.set_defaults(run=cluster_images)
    args = parser.parse_args()
    args.run(args)


if __name__ == "__main__":
    main()
