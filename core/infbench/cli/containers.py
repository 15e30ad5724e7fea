"""``infbench containers build|list``: the vendor plugins' worker images."""

from __future__ import annotations

import contextlib
import logging
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from infbench.cli.common import JSON_HELP, err, out, print_json, split
from infbench.data.errors import ConfigError, InfbenchError
from infbench.runtimes import images as im

Opt = typer.Option

containers_app = typer.Typer(
    help="Worker images: build the vendor plugins' images (`containers/cpu/Dockerfile.*`, "
         "`plugins/<vendor>/docker/Dockerfile.*`) and list what is built. `infbench run --executor container` "
         "runs cells in them.", no_args_is_help=True, rich_markup_mode="markdown")


def parse_build_args(items: list[str]) -> dict[str, str]:
    """``["BASE_IMAGE=x"]`` -> ``{"BASE_IMAGE": "x"}``.

    Raises:
        ConfigError: an item without ``=``.
    """
    args = {}
    for it in items:
        k, sep, v = it.partition("=")
        if not sep or not k:
            raise ConfigError(f"--build-arg {it!r} is not KEY=VALUE",
                              hint="e.g. --build-arg BASE_IMAGE=python:3.11-slim")
        args[k] = v
    return args


@containers_app.command("build")
def containers_build(
    vendor: Annotated[list[str] | None, Opt("--vendor", help="Only these vendors (cpu, nvidia, amd, intel, "
                                            "habana). Repeat or comma list. Default: all.")] = None,
    image: Annotated[list[str] | None, Opt("--image", help="Only these recipes by Dockerfile suffix (vllm, "
                                           "trtllm, llamacpp).")] = None,
    build_arg: Annotated[list[str] | None, Opt("--build-arg", help="KEY=VALUE for the Dockerfile (BASE_IMAGE, "
                                               "ENGINE_VERSION, PIP_ARGS...). Repeat for more.")] = None,
    network: Annotated[str | None, Opt("--network", help="Network of the RUN steps: none (offline builds), host, "
                                       "or the engine's default.")] = None,
    context: Annotated[Path | None, Opt("--context", help="The infbench source tree (default: the checkout "
                                        "infbench runs from).")] = None,
    as_json: Annotated[bool, Opt("--json", help=JSON_HELP)] = False,
) -> None:
    """Build worker images with the docker SDK, tagged infbench/<vendor>-<name>:<infbench version>
    and :<infbench version>-<engine><engine version>.

    A recipe whose base image cannot be pulled fails with the reason and the others go on
    (exit 1 if any failed). Offline hosts: build the base locally and pass it, e.g.
    `bash containers/cpu/prepare-offline.sh` then `infbench containers build --vendor cpu
    --build-arg BASE_IMAGE=infbench/debian-python:bookworm --build-arg PIP_ARGS=--no-index --network none`.
    """
    root = im.source_root(context)
    args = parse_build_args(build_arg or [])
    recipes = im.find_recipes(root)
    vendors = split(vendor, "--vendor")
    names = split(image, "--image")
    chosen = [r for r in recipes if (not vendors or r.vendor in vendors) and (not names or r.name in names)]
    if not chosen:
        raise ConfigError(f"no image recipe matches vendor={vendors} image={names}",
                          hint="known: " + ", ".join(f"{r.vendor}/{r.name}" for r in recipes))
    im.docker_client()  # a Docker engine answers, before any build
    results = []
    for r in chosen:
        status = err.status(f"building {r.repository} from {r.dockerfile}") if not as_json else contextlib.nullcontext()
        t0 = time.perf_counter()
        with status as st:
            def line(ln: str, st=st, r=r) -> None:
                logging.getLogger("infbench.build").debug("%s", ln)
                if st is not None:
                    st.update(f"building {r.repository}: {escape(ln[:100])}")
            try:
                tags = im.build(r, root, args, network, line)
                results.append({"recipe": f"{r.vendor}/{r.name}", "dockerfile": r.dockerfile, "ok": True, "tags": tags,
                                "seconds": round(time.perf_counter() - t0, 1)})
            except InfbenchError as exc:
                results.append({"recipe": f"{r.vendor}/{r.name}", "dockerfile": r.dockerfile, "ok": False,
                                "error": exc.message, "hint": exc.hint})
        if not as_json:
            res: dict[str, Any] = results[-1]
            if res["ok"]:
                out.print(f"[green]built[/] {', '.join(res['tags'])} ({res['seconds']} s)")
            else:
                out.print(f"[red]failed[/] {res['recipe']} ({r.dockerfile}): {escape(res['error'])}")
    if as_json:
        print_json({"context": str(root), "results": results})
    if not all(r["ok"] for r in results):
        raise typer.Exit(1)


@containers_app.command("list")
def containers_list(
    context: Annotated[Path | None, Opt("--context", help="The infbench source tree, for the recipes.")] = None,
    as_json: Annotated[bool, Opt("--json", help=JSON_HELP)] = False,
) -> None:
    """Show the image recipes and the infbench images built on this Docker engine
    (engine and its version, infbench version, store schema: images with another schema
    are refused by `infbench run` until rebuilt)."""
    built = im.list_images()
    try:
        recipes = im.find_recipes(im.source_root(context))
    except ConfigError:
        recipes = []
    tags = {t for b in built for t in b["tags"]}
    missing = [{"recipe": f"{r.vendor}/{r.name}", "dockerfile": r.dockerfile, "image": r.tags()[0]}
               for r in recipes if r.tags()[0] not in tags]
    if as_json:
        print_json({"images": built, "not_built": missing})
        return
    t = Table(title="infbench worker images")
    for col in ("image", "vendor", "engine", "infbench", "schema", "size", "base"):
        t.add_column(col)
    for b in built:
        schema = b["schema_version"] if b["compatible"] else f"[red]{b['schema_version']} (rebuild)[/]"
        t.add_row("\n".join(b["tags"]) or b["id"], b["vendor"], f"{b['engine']} {b['engine_version']}".strip(),
                  b["infbench_version"], schema, f"{(b['size_bytes'] or 0) / 2**20:,.0f} MiB", b["base_image"] or "")
    out.print(t)
    for m in missing:
        v, n = m["recipe"].split("/")
        out.print(f"[dim]not built: {m['image']} ({m['dockerfile']}): `infbench containers build --vendor {v} "
                  f"--image {n}`[/]")


def register(app: typer.Typer) -> None:
    """Add the ``containers`` command group to ``app``."""
    app.add_typer(containers_app, name="containers")
