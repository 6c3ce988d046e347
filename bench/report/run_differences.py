"""What differs between two runs before any score is compared: suite settings (protocol or reported only), model
weights, and each row's recorded settings, as (dotted key, baseline value, new value) leaves."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd

from faithbench.bench.report.compare_inputs import SUITE_COST, SUITE_PROTOCOL

ABSENT = object()  # a key on one side only


def diff(a: Any, b: Any, prefix: str) -> list[tuple[str, Any, Any]]:
    """(dotted key, baseline value, new value) of every leaf that differs."""
    if isinstance(a, dict) and isinstance(b, dict):
        out: list[tuple[str, Any, Any]] = []
        for k in sorted(set(a) | set(b), key=str):
            out += diff(a.get(k, ABSENT), b.get(k, ABSENT), f"{prefix}.{k}" if prefix else str(k))
        return out
    return [] if a == b else [(prefix, a, b)]


def show(value: Any) -> str:
    if value is ABSENT:
        return "(absent)"
    text = json.dumps(value, sort_keys=True) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def changes(diffs: list[tuple[str, Any, Any]]) -> str:
    return ", ".join(f"{k} {show(a)} → {show(b)}" for k, a, b in diffs)


def cell(value: Any) -> Any:
    """A row column's value as compared: NaN is empty, 3.0 is 3."""
    if value is None or (not isinstance(value, str) and pd.isna(value)):
        return ""
    if isinstance(value, bool | np.bool_):
        return bool(value)
    if isinstance(value, int | float | np.integer | np.floating):
        number = float(value)
        return int(number) if number.is_integer() else number
    return str(value)


def suite_names(frame: pd.DataFrame, record: dict | None) -> str:
    if "suite" in frame.columns:
        names = sorted({str(s) for s in frame["suite"].dropna()})
        if names:
            return ", ".join(names)
    if record and record.get("name"):
        return str(record["name"])
    return "?"


def suite_differences(sb: dict, sn: dict) -> tuple[list[tuple[str, Any, Any]], list[str]]:
    """Protocol differences of the suites (every row's scores change) and lines reported only."""
    protocol = [(k, sb.get(k), sn.get(k)) for k in SUITE_PROTOCOL if sb.get(k) != sn.get(k)]
    reported = []
    cost = [(k, sb.get(k), sn.get(k)) for k in SUITE_COST if sb.get(k) != sn.get(k)]
    if cost:
        reported.append(f"cost settings differ: {changes(cost)} (reported only: they batch or split the work)")
    if sb.get("data_root") != sn.get("data_root"):
        reported.append(
            f"data_root differs: {show(sb.get('data_root'))} → {show(sn.get('data_root'))} (reported only: the "
            "same data may lie at another path; the dataset name, sample counts and scores are gated)"
        )
    tables = [
        d
        for k in sorted(set(sb) & set(sn))
        if k != "method_params" and isinstance(sb[k], dict) and isinstance(sn[k], dict)
        for d in diff(sb[k], sn[k], f"[{k}]")
    ]
    if tables:
        reported.append(
            f"suite metric settings differ: {changes(tables[:6])}{' ...' if len(tables) > 6 else ''} "
            "(a row fails as PROTOCOL where its recorded params differ)"
        )
    return protocol, reported


def weights(base: pd.DataFrame, new: pd.DataFrame) -> list[str]:
    if "model_weights_sha256" not in base.columns or "model_weights_sha256" not in new.columns:
        return []
    lines = []
    for model in sorted(set(base["model"]) & set(new["model"])):
        hb = sorted({str(h) for h in base.loc[base["model"] == model, "model_weights_sha256"].dropna() if str(h)})
        hn = sorted({str(h) for h in new.loc[new["model"] == model, "model_weights_sha256"].dropna() if str(h)})
        if hb and hn and hb != hn:
            lines.append(f"{model} ({', '.join(h[:8] for h in hb)} → {', '.join(h[:8] for h in hn)})")
    if not lines:
        return []
    return [
        f"model weights differ for {', '.join(lines)}: those scores are of different weights "
        "(reported, not failing: a retrained model is gated on its scores)"
    ]


def provenance_differences(pb: dict, pn: dict) -> list[str]:
    """Reported only: the machines' numerics (``faithbench numerics``) and hosts, which move scores by rounding."""
    lines = []
    nb, nn = pb.get("numerics"), pn.get("numerics")
    if nb and nn and nb != nn:  # a run from before the column records none: nothing to say
        lines.append(
            f"numerics differ: {nb or '?'} → {nn or '?'} (reported only: other CPU numerics round otherwise; "
            'eval "$(faithbench numerics)" before both runs makes them portable)'
        )
    return lines
