"""One module per subcommand, named as the subcommand (pip's ``commands_dict``).

Each module has ``add_arguments(parser)`` and ``run(args) -> int`` (parse, call an engine, render), and
may have ``parse_args(parser, argv)`` for its own argv quirks (``train``'s ``--`` overrides). The CLI
imports only the chosen module, so ``--help`` and ``explain`` pay for no other command's imports.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Command:
    module: str
    summary: str


COMMANDS: dict[str, Command] = {
    "check": Command("doctor.commands.check", "preflight the environment (and a training YAML)"),
    "fix": Command("doctor.commands.fix", "apply the safe playbooks to a copy of the config and show the diff"),
    "train": Command("doctor.commands.train", "preflight, run llamafactory-cli train, fix and resume on failure"),
    "explain": Command("doctor.commands.explain", "classify a failure log: category, playbook, evidence"),
    "report": Command("doctor.commands.report", "a redacted bundle (check + environment + config + explained logs) "
                      "for a support engineer"),
    "demo": Command("doctor.commands.demo", "fail -> fix -> retry -> success on a tiny model (CPU, about a minute)"),
    "codes": Command("doctor.commands.codes", "list or explain finding ids"),
    "playbooks": Command("doctor.commands.playbooks", "list the playbooks (remedies fix/train apply)"),
}
