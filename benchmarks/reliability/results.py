"""benchmarks/reliability/results.json (one stamped section per run) and its Markdown.

The file has the shape of benchmarks/results.json, `{"benchmarks": {name: {"stamp", "data"}}}`,
with `command` (how to rerun it) and `acceptance` (each criterion and whether it held) in each
section. `render_markdown(load())` is what benchmarks/RESULTS.md includes.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from benchmarks import results
from benchmarks.stamp import machine_stamp

HERE = Path(__file__).resolve().parent
RESULTS_JSON = HERE / "results.json"
TITLES = {
    "faults": "Provider fault injection",
    "load": "Concurrent streaming load",
    "outage": "PostgreSQL outage under load",
    "abuse": "Denial of service and hostile input (issue 17)",
}


def load(path: Path = RESULTS_JSON) -> dict[str, Any]:
    """Stored results (empty when none)."""
    return results.load(path)


def save(
    name: str, data: dict[str, Any], acceptance: dict[str, bool], command: str,
    path: Path = RESULTS_JSON,
) -> None:
    """Replace one section, stamped with the machine, commit, date and load average."""
    stored = load(path)
    stamp = machine_stamp()
    stamp["load_average"] = round(os.getloadavg()[0], 2)
    stored["benchmarks"][name] = {
        "stamp": stamp, "command": command, "acceptance": acceptance, "data": results.clean(data),
    }
    path.write_text(json.dumps(stored, indent=1) + "\n", encoding="utf-8")


def _cell(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "**no**"
    if isinstance(value, float):
        return f"{value:,.1f}"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, dict):
        return ", ".join(f"{k}: {_cell(v)}" for k, v in value.items()) or "-"
    if isinstance(value, list):
        return ", ".join(map(str, value)) or "-"
    return "-" if value is None else str(value)


def render_markdown(results: dict[str, Any]) -> str:
    """A "Reliability (issues 8 and 17)" section: per run, its acceptance and its figures."""
    parts = ["## Reliability (issues 8 and 17)\n"]
    for name, title in TITLES.items():
        section = results["benchmarks"].get(name)
        if section is None:
            command = f"python -m benchmarks.reliability {name}"
            parts.append(f"### {title}\n\nNot run yet: `{command}`.\n")
            continue
        stamp = section["stamp"]
        head = (
            f"### {title}\n\n_`{section['command']}` at commit `{stamp.get('commit')}`"
            f"{' + uncommitted changes' if stamp.get('dirty') else ''}, {stamp.get('date')}, "
            f"{stamp.get('cores')} cores, load average {stamp.get('load_average')}._\n\n"
        )
        parts.append(head + _body(section))
    return "\n".join(parts)


def _body(section: dict[str, Any]) -> str:
    """Acceptance and figures; a run of cases (abuse) as one table row per case."""
    cases = section["data"].get("rows")
    if cases is not None:
        rows = [f"| {c['case']} | {c['store']} | {c['figure']} | {c['promise']} | "
                f"{_cell(c['held'])} |" for c in cases]
        return ("| case | store | measured | promise | held |\n|---|---|---|---|---|\n"
                + "\n".join(rows) + "\n")
    rows = [f"| {k} | {_cell(v)} |" for k, v in section["acceptance"].items()]
    figures = [f"| {k} | {_cell(v)} |" for k, v in section["data"].items()
               if k not in ("first_problems",)]
    return ("| acceptance | held |\n|---|---|\n" + "\n".join(rows) + "\n\n"
            "| figure | value |\n|---|---|\n" + "\n".join(figures) + "\n")
