"""Argument parsing and dispatch for the ``sessionledger`` command line.

``--store`` is accepted before or after the command name (README.md, "The command line"): the
top-level parser and every sub-parser define it, the sub-parsers with a suppressed
default so that a value given before the command is not overwritten. ``copy`` names its
two stores with ``--from`` and ``--to`` and refuses ``--store``.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, NoReturn

Command = Callable[[argparse.Namespace], Coroutine[Any, Any, int]]

#: Command name → ``module:function`` (imported only when that command runs).
COMMANDS: dict[str, str] = {
    "demo": "demo:demo",
    "ls": "inspecting:list_sessions",
    "show": "inspecting:show",
    "messages": "inspecting:messages",
    "transcript": "inspecting:transcript_command",
    "verify": "checking:verify",
    "repair": "checking:repair",
    "copy": "moving:copy",
    "catalog": "inspecting:catalog",
    "stats": "inspecting:stats",
    "delete": "moving:delete",
    "import": "moving:import_history",
    "prune": "retaining:prune",
    "audit": "retaining:audit",
    "search": "searching:search",
    "reindex": "indexing:reindex",
    "tail": "following:tail",
    "view": "viewing:view",
    "export": "exporting:export",
}

STORE_HELP = (
    "store URL: sqlite:PATH, jsonl:DIR or memory:NAME (default: $SESSIONLEDGER_STORE, "
    "else sqlite:$XDG_DATA_HOME/sessionledger/ledger.db)"
)


PLUGIN_HELP = (
    "load a plugin that is not published as an entry point (its event types, its "
    "backends); MODULE:ATTR names a plugin object, module or class; repeatable"
)


class CommandError(Exception):
    """A failure of the command line itself, reported like a ``LedgerError``
    (``error: CODE: message``, exit 2).

    Deliberately not a ``LedgerError``: the library's error classes are those of
    docs/errors.md, and these never leave the command line.
    """

    code = "COMMAND"


class UsageError(CommandError):
    """The command line itself is wrong (unknown command or option, missing argument)."""

    code = "USAGE"


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line, raised instead of printed."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see '{self.prog} --help')")


def version_text() -> str:
    """Return ``sessionledger X.Y.Z`` from the installed metadata, then one line for each
    other installed ``sessionledger-*`` distribution (the backends, the invariants)."""
    try:
        own = importlib.metadata.version("sessionledger")
    except importlib.metadata.PackageNotFoundError:
        own = "(version unknown: no installed distribution metadata)"
    siblings: set[tuple[str, str]] = set()
    for dist in importlib.metadata.distributions():
        name = (dist.metadata["Name"] or "").lower().replace("_", "-")
        if name.startswith("sessionledger-"):
            siblings.add((name, dist.version))
    return "\n".join([f"sessionledger {own}", *(f"  {n} {v}" for n, v in sorted(siblings))])


class _Version(argparse.Action):
    """``--version``: print ``version_text()`` and exit 0 (read only when asked)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest=argparse.SUPPRESS, nargs=0, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *args: object) -> NoReturn:
        print(version_text(), flush=True)
        parser.exit()


def _add_json(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--json", action="store_true", help=f"print {what} as plain JSON")


#: What a ``--since``/``--until`` value may be (``sessionledger.storage._listing.parse_when``).
WHEN_HELP = "a duration ago: 2d, 12h; or an ISO date or time, UTC unless it gives an offset"


def _add_filters(parser: argparse.ArgumentParser, verb: str) -> None:
    parser.add_argument(
        "--title", metavar="TEXT", help=f"only {verb} sessions whose title holds TEXT (any case)"
    )
    parser.add_argument(
        "--meta",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=f"only {verb} sessions whose header meta has KEY equal to VALUE (read as JSON "
        "when it is a JSON string, number, true, false or null; else as text); repeatable",
    )


def _count(text: str) -> int:
    """A seq or a number of events: a non-negative integer (anything else is a usage error)."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """Return the parser for every command and option."""
    parser = _Parser(
        prog="sessionledger",
        description="See, check and move the sessions of a sessionledger store.",
        epilog="Start with 'sessionledger demo', then try the commands it suggests.",
    )
    parser.add_argument("--version", action=_Version, help="print the installed versions")
    parser.add_argument("--store", metavar="URL", default=None, help=STORE_HELP)
    parser.add_argument(
        "--plugin",
        dest="plugins_before",
        metavar="MODULE:ATTR",
        action="append",
        default=[],
        help=PLUGIN_HELP,
    )
    store_option = _Parser(add_help=False)
    store_option.add_argument("--store", metavar="URL", default=argparse.SUPPRESS, help=STORE_HELP)
    plugin_option = _Parser(add_help=False)
    # A separate destination: the sub-parser's namespace would replace the list given
    # before the command name; parse() joins the two.
    plugin_option.add_argument(
        "--plugin",
        dest="plugins_after",
        metavar="MODULE:ATTR",
        action="append",
        default=[],
        help=PLUGIN_HELP,
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    commands.required = True

    def add(name: str, help: str) -> argparse.ArgumentParser:
        # copy names its two stores with --from and --to: it takes no --store.
        parents = [plugin_option] if name == "copy" else [store_option, plugin_option]
        return commands.add_parser(name, parents=parents, help=help, description=help)

    demo = add("demo", "run a scripted agent session (crash and repair included) on the store")
    demo.add_argument("--seed", type=int, default=7, help="seed of the fake model (default 7)")
    demo.add_argument("--session", metavar="ID", help="session id (default: demo-<random>)")

    ls = add(
        "ls",
        "list stored sessions from their summaries (no event is read): id, created, title, "
        "events, last activity, open turn; most recent activity first",
    )
    ls.add_argument(
        "--limit",
        type=int,
        metavar="N",
        help="at most N sessions; the last line names the next page",
    )
    ls.add_argument(
        "--after", metavar="CURSOR", help="the page after CURSOR (printed by the previous page)"
    )
    _add_filters(ls, "list")
    ls.add_argument("--since", metavar="WHEN", help=f"last activity at or after WHEN ({WHEN_HELP})")
    ls.add_argument("--until", metavar="WHEN", help=f"last activity before WHEN ({WHEN_HELP})")
    ls.add_argument(
        "--order",
        default="last_activity",
        metavar="ORDER",
        help="last_activity (the default: most recent activity first) or created "
        "(newest session first); ties by id",
    )
    _add_json(ls, 'the page: {"sessions": [...], "next": cursor or null}')

    show = add("show", "print a session's log as stored (no repair)")
    show.add_argument("id", metavar="ID")
    show.add_argument("--json", action="store_true", help="print the events as JSONL envelopes")
    show.add_argument(
        "--chunks", action="store_true", help="one row per assistant/chunk (default: one per run)"
    )
    show.add_argument(
        "--from",
        dest="start",
        type=_count,
        default=0,
        metavar="SEQ",
        help="start at this seq (default 0)",
    )
    show.add_argument("--limit", type=_count, metavar="N", help="show at most N events")

    messages = add("messages", "print the messages the model sees (derived from the surface)")
    messages.add_argument("id", metavar="ID")
    messages.add_argument("--at", type=int, metavar="SEQ", help="as of this seq (time travel)")
    messages.add_argument(
        "--format",
        choices=("plain", "openai", "anthropic"),
        default="plain",
        help="plain (a table), or the request history of a provider API as JSON",
    )
    _add_json(messages, "the messages (sessionledger's own shape)")

    transcript = add("transcript", "print what the user saw, compacted history included")
    transcript.add_argument("id", metavar="ID")
    _add_json(transcript, "the messages")

    verify = add("verify", "check envelopes, surface and invariants; exit 1 on any problem")
    verify.add_argument("ids", nargs="*", metavar="ID", help="sessions to check (default: all)")
    verify.add_argument("--all", action="store_true", help="check every session")
    _add_json(verify, "the reports")

    repair = add("repair", "close an interrupted turn durably, as a resume would")
    repair.add_argument("id", metavar="ID")
    repair.add_argument("--dry-run", action="store_true", help="show what would be appended")
    repair.add_argument(
        "--salvage",
        action="store_true",
        help="cut a damaged log back to its longest intact prefix, moving the rest into "
        "quarantine (never done without this option)",
    )
    _add_json(repair, "the appended events")

    copy = add("copy", "copy sessions between stores, each verified, then published whole")
    copy.add_argument("--from", dest="source", required=True, metavar="URL", help="source store")
    copy.add_argument("--to", dest="target", required=True, metavar="URL", help="destination")
    copy.add_argument("ids", nargs="*", metavar="ID", help="sessions to copy (default: all)")
    copy.add_argument(
        "--skip-existing",
        action="store_true",
        help="leave out sessions the destination already has, as they are (default: "
        "refuse); the rerun of a stopped copy",
    )
    _add_json(copy, "the outcome")

    catalog = add("catalog", "list registered event types, their plugins, and store schemes")
    _add_json(catalog, "the catalog")

    stats = add("stats", "events by type, surface size, bytes and chunk-packing ratio")
    stats.add_argument("id", metavar="ID")
    _add_json(stats, "the statistics")

    imported = add("import", "create a session from a JSON file of OpenAI or Anthropic messages")
    imported.add_argument(
        "file", metavar="FILE", help="a JSON list of messages, or {messages, system}"
    )
    imported.add_argument(
        "--format", choices=("openai", "anthropic"), required=True, help="the file's message format"
    )
    imported.add_argument("--id", metavar="ID", help="session id (default: a new UUID)")
    _add_json(imported, "the outcome")

    delete = add("delete", "delete a stored session")
    delete.add_argument("id", metavar="ID")
    _add_json(delete, "the outcome")

    prune = add(
        "prune",
        "delete old sessions: shows the plan and deletes nothing unless --yes is given; "
        "every executed prune is written to the store's audit log",
    )
    prune.add_argument(
        "--older-than",
        metavar="DURATION",
        help="sessions whose last activity is older than DURATION (30d, 12h, 90m, 2w)",
    )
    prune.add_argument(
        "--keep-last",
        type=int,
        metavar="N",
        help="keep the N most recently active sessions (of those the filters select)",
    )
    _add_filters(prune, "prune")
    prune.add_argument("--yes", action="store_true", help="delete the planned sessions")
    _add_json(prune, "the plan (and, with --yes, what was deleted)")

    audit = add("audit", "print the store's audit log: every executed prune, interrupted ones too")
    _add_json(audit, "the audit records, oldest first")

    search = add("search", "find messages holding every word of TEXT, newest first")
    search.add_argument("text", metavar="TEXT", help="the words to look for (case ignored)")
    search.add_argument("--session", metavar="ID", help="search this session only")
    search.add_argument(
        "--limit", type=int, default=20, metavar="N", help="at most N hits (default 20)"
    )
    search.add_argument(
        "--type",
        dest="types",
        action="append",
        metavar="TYPE",
        help="only events of TYPE (user/message, assistant/message, tool/result); repeatable",
    )
    _add_json(search, "the hits")

    reindex = add(
        "reindex",
        "rebuild the summaries and search texts from the logs (all sessions, or ID); "
        "exit 1 if a log cannot be read",
    )
    reindex.add_argument("id", nargs="?", metavar="ID", help="one session (default: all)")
    _add_json(reindex, "the outcome")

    export = add(
        "export",
        "write a session in another format: markdown (the transcript), sts (the Hugging "
        "Face Hub's agent-trace JSONL), openai or anthropic (the derived messages), html "
        "(one self-contained page of the viewer's views)",
    )
    export.add_argument("id", metavar="ID")
    export.add_argument(
        "--format", choices=("markdown", "sts", "openai", "anthropic", "html"), required=True
    )
    export.add_argument(
        "-o", "--output", metavar="FILE", help="write FILE (whole, or not at all) instead of stdout"
    )

    tail = add(
        "tail",
        "print a session's acknowledged events (or every session's, --all); with -f, go "
        "on printing them as they are acknowledged, from any process; Ctrl-C stops it",
    )
    tail.add_argument("id", nargs="?", metavar="ID", help="the session (or --all)")
    tail.add_argument("--all", action="store_true", help="every session of the store")
    tail.add_argument(
        "-f", "--follow", action="store_true", help="wait for more events (until Ctrl-C)"
    )
    tail.add_argument(
        "--after",
        metavar="SEQ|CURSOR",
        help="only events after this seq (default: from the first event); with --all, the "
        "cursor a stopped tail --all printed",
    )
    tail.add_argument(
        "--json",
        action="store_true",
        help="one JSON object per event and line, as show --json writes an event",
    )

    view = add(
        "view",
        "serve a local, read-only web viewer of the store (its sessions, or session ID); "
        "prints the URL first; Ctrl-C stops it",
    )
    view.add_argument("id", nargs="?", metavar="ID", help="the session to open first")
    view.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)"
    )
    view.add_argument(
        "--port", type=int, default=0, metavar="PORT", help="port (default: a free one)"
    )
    view.add_argument(
        "--no-browser",
        action="store_true",
        help="never open a browser (one opens only when the output is a terminal)",
    )
    return parser


def command_function(name: str) -> Command:
    """Import and return the coroutine function that runs command *name*."""
    module_name, _, function = COMMANDS[name].partition(":")
    module = importlib.import_module(f"sessionledger.cli._{module_name}")
    command: Command = getattr(module, function)
    return command


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    """Parse *argv* (``sys.argv[1:]`` when None); mistakes raise ``UsageError``.

    ``args.plugin_specs`` lists every ``--plugin``, before and after the command name.
    Once a command is named, an argument nobody knows points to that command's help.
    """
    args, extras = build_parser().parse_known_args(argv)
    see = f"(see 'sessionledger {args.command} --help')"
    if args.command == "copy" and (
        args.store is not None or any(extra.partition("=")[0] == "--store" for extra in extras)
    ):
        raise UsageError(f"copy takes no --store: it reads --from URL and writes --to URL {see}")
    if extras:
        raise UsageError(f"unrecognized arguments: {' '.join(extras)} {see}")
    args.plugin_specs = [*args.plugins_before, *args.plugins_after]
    return args
