"""``fiduciary attention``: run the watcher from a config file, list its decisions, evaluate a
judge on labelled events. Registered by ``register(app)`` (the CLI calls it at import).
"""

from __future__ import annotations

import asyncio
import importlib
import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from ..agent import Agent
from ..agent_factory import agent_of, load_factory
from ..cli._common import print_error
from ..exceptions import ConfigurationError, FiduciaryError
from ..observability.environment import trace_from_env
from ..stores.sqlite import SQLiteStore
from ..wallet.watch import WalletWatch
from .config import AttentionConfig, load_config
from .evaluation import Report
from .events_file import EventsFile
from .feed import decision_json
from .judge import Judge, llm_judge
from .record import AttentionRecord, DecisionRecord
from .sources import FiduciaryEvents
from .watch import Attention, Source
from .watch import Report as WatchReport

__all__ = ["attention_app", "register"]

attention_app = typer.Typer(
    help="The attention layer: a judge decides which events deserve a run, a person or nothing.",
    no_args_is_help=True,
)

ConfigPath = Annotated[
    Path, typer.Option("--config", "-c", help="The attention TOML file (see docs/attention.md).")
]


def _fail(message: str) -> typer.Exit:
    print_error(message)
    return typer.Exit(2)


def load_judge(config: AttentionConfig) -> Judge:
    if config.judge is not None:
        module_name, _, attribute = config.judge.partition(":")
        try:
            found: Any = getattr(importlib.import_module(module_name), attribute)
        except (ImportError, AttributeError) as exc:
            raise ConfigurationError(f"cannot load the judge {config.judge}: {exc}") from exc
        judge: Judge = found if hasattr(found, "name") else found()
        return judge
    model: Any
    if config.model == "scripted":
        model = scripted_judge_model()
    else:
        from ..models.registry import resolve_model

        model = resolve_model(str(config.model))
    options: dict[str, Any] = {"context_tokens": config.context_tokens}
    if config.system:
        options["system"] = config.system
    criteria = {r: a.criterion for r, a in config.routes.items() if a.criterion}
    return llm_judge(model, criteria=criteria, **options)


def scripted_judge_model() -> Any:
    """The offline judge's model: the scripted model answering with the pipeline check's keyword
    rule (``evaluation.scripted_answer``). No key, no network; it checks the pipeline, it is not
    a judge to trust."""
    from ..models.scripted import ScriptedModel
    from .evaluation import scripted_answer

    return ScriptedModel([], json_answer=scripted_answer, name="scripted")


def _sources(
    config: AttentionConfig, store: SQLiteStore, *, once: bool
) -> tuple[list[Source], list[Any]]:
    sources: list[Source] = []
    closing: list[Any] = []
    for name, options in config.sources.items():
        if name == "fiduciary":
            sources.append(FiduciaryEvents(store, every=float(options.get("every", 5)), once=once))
        elif name == "file":
            every = float(options.get("every", 5))
            sources.append(EventsFile(options["path"], every=every, once=once))
        else:
            from ..wallet.wallet import PaperWallet

            wallet = PaperWallet(options["path"])
            closing.append(wallet)
            sources.append(
                WalletWatch(
                    wallet,
                    list(options.get("principals", [])),
                    every=float(options.get("every", 60)),
                    once=once,
                )
            )
    return sources, closing


def _line(decision: DecisionRecord) -> str:
    shown = ", ".join(f"{k} {v:.2f}" for k, v in decision.probabilities.items())
    what = decision.route or f"dead letter ({decision.error})"
    started = f" run {decision.run_id}" if decision.run_id else ""
    return (
        f"#{decision.seq} {decision.event_type} ({decision.source}) → {what} [{shown}] "
        f"{decision.action or 'acting'}{started}"
    )


async def _run(config_path: Path, once: bool) -> int:
    console = Console()
    config = load_config(config_path)
    config.db.parent.mkdir(parents=True, exist_ok=True)
    store = await SQLiteStore.open(config.db)
    record = AttentionRecord(str(config.db))
    sources, closing = _sources(config, store, once=once)
    try:
        agent: Agent | None = None
        if config.agent is not None:
            agent = trace_from_env(agent_of(load_factory(config.agent)(store), config.agent))

        async def notify(decision: DecisionRecord, message: str) -> None:
            console.print(f"[yellow]attention[/] {escape(message)}", soft_wrap=True)

        def report(item: WatchReport) -> None:
            console.print(f"[dim]{escape(f'{item.kind} {item.source}: {item.message}')}[/]")

        attention = Attention(
            judge=load_judge(config),
            record=record,
            routes=config.routes,
            sources=sources,
            agent=agent,
            notify=notify,
            predicates=config.predicates,
            window_size=config.window_size,
            on_report=report,
        )
        seen = 0
        for decision in await record.decisions(after=0, limit=1_000_000):
            seen = decision.seq
        await attention.run()
        for decision in await record.decisions(after=seen, limit=1_000_000):
            console.print(escape(_line(decision)), soft_wrap=True)
    finally:
        for wallet in closing:
            wallet.close()
        await record.close()
        await store.close()
    return 0


@attention_app.command("run")
def run(
    config: ConfigPath,
    once: Annotated[
        bool, typer.Option("--once", help="One pass over every source, then stop.")
    ] = False,
) -> None:
    """Watch the configured sources and act on what the judge decides (Ctrl-C stops)."""
    try:
        code = asyncio.run(_run(config, once))
    except (FiduciaryError, OSError) as exc:
        raise _fail(str(exc)) from exc
    except KeyboardInterrupt:
        code = 130
    raise typer.Exit(code)


@attention_app.command("decisions")
def decisions(
    config: ConfigPath,
    after: Annotated[int, typer.Option("--after", help="Only decisions after this seq.")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per line.")] = False,
) -> None:
    """The decision feed: each decision's route, probabilities and what it started."""
    try:
        cfg = load_config(config)
    except ConfigurationError as exc:
        raise _fail(str(exc)) from exc
    if not cfg.db.is_file():  # a listing creates nothing
        raise _fail(
            f"no attention record at {cfg.db} yet: fiduciary attention run --config {config} "
            "makes it"
        )

    async def read() -> list[DecisionRecord]:
        record = AttentionRecord(str(cfg.db))
        try:
            return await record.decisions(after=after, limit=1_000_000)
        finally:
            await record.close()

    found = asyncio.run(read())
    console = Console()
    for decision in found:
        if as_json:
            print(json.dumps(decision_json(decision)))
        else:
            console.print(escape(_line(decision)), soft_wrap=True)


LABELLED = Path(__file__).with_name("labelled") / "events.jsonl"


async def _evaluate(
    labelled: Path, model: str | None, judge_spec: str | None, limit: int | None
) -> Report:
    from .evaluation import evaluate, read_labelled

    routes = ("act", "notify", "drop")
    items = read_labelled(labelled, routes=routes)[:limit]
    judge: Judge
    if judge_spec is not None:
        judge = load_judge(_judge_only(judge_spec))
    elif model is None or model == "scripted":
        judge = llm_judge(scripted_judge_model())
    else:
        from ..models.registry import resolve_model

        resolved: Any = resolve_model(model)
        judge = llm_judge(resolved)
    return await evaluate(judge, items, routes)


def _judge_only(spec: str) -> AttentionConfig:
    return AttentionConfig(db=Path(), routes={}, judge=spec)


@attention_app.command("eval")
def evaluate_command(
    labelled: Annotated[
        Path,
        typer.Argument(
            help="Labelled events, JSON lines (default: the set shipped with fiduciary)."
        ),
    ] = LABELLED,
    model: Annotated[
        str | None,
        typer.Option("--model", help="The judge's model (scripted: the pipeline check)."),
    ] = None,
    judge: Annotated[
        str | None, typer.Option("--judge", help="A judge instead: module:attribute.")
    ] = None,
    png: Annotated[
        Path | None, typer.Option("--png", help="Write the reliability diagram there.")
    ] = None,
    limit: Annotated[int | None, typer.Option("--limit", help="Only the first N events.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Per-route precision and recall, the Brier score and a reliability diagram."""
    try:
        report = asyncio.run(_evaluate(labelled, model, judge, limit))
        if png is not None:
            from .evaluation import reliability_png

            reliability_png(report, png)
    except (FiduciaryError, OSError, ValueError, ImportError) as exc:
        raise _fail(str(exc)) from exc
    if as_json:
        print(json.dumps(report.as_json()))
        return
    console = Console()
    console.print(
        escape(
            f"{report.model}: {report.count} events, accuracy {report.accuracy:.1%}, "
            f"Brier {report.brier:.4f}, failures {report.failures}"
        )
    )
    for route in report.routes:
        precision, recall = report.precision[route], report.recall[route]
        shown = [
            "-" if precision is None else f"{precision:.2f}",
            "-" if recall is None else f"{recall:.2f}",
        ]
        console.print(
            escape(
                f"  {route:<7} precision {shown[0]}  recall {shown[1]}  "
                f"support {report.support[route]}  Brier {report.brier_by_route[route]:.4f}"
            )
        )
    console.print("reliability by route (bin: mean predicted -> observed, pairs)")
    for route in report.routes:
        bins = "  ".join(
            f"{b['low']:.1f}-{b['high']:.1f}: {b['predicted']:.2f} -> {b['observed']:.2f} "
            f"({b['count']:.0f})"
            for b in report.bins_by_route[route]
        )
        console.print(escape(f"  {route:<7} {bins}"), soft_wrap=True)
    if png is not None:
        console.print(escape(f"reliability diagram: {png}"))


def register(app: typer.Typer) -> None:
    """Add the ``attention`` group to the ``fiduciary`` command."""
    app.add_typer(attention_app, name="attention")
