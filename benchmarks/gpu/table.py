"""The GPU check's table (gpu.md) from its report (gpu.json): one block per section that
ran, every row of it, and the seconds each section had and spent."""

from __future__ import annotations

ON_OFF = {True: "on", False: "off"}


def table(report: dict) -> str:
    s = report["sections"]
    lines = [f"# pods on a GPU: {report['device']}, {report['date']}",
             f"torch {report['torch']}, transformers {report['transformers']}; command: "
             f"`{report['command']}`", "", "| section | share s | spent s | status | rows |",
             "|---|---|---|---|---|"]
    lines += [f"| {name} | {v['share_s']:.0f} | {v['spent_s']:.0f} | {v['status']} | "
              f"{len(v['rows'])} |" for name, v in s.items()]
    if s.get("matmul", {}).get("rows"):
        m = s["matmul"]["rows"][0]
        lines += ["", f"bf16 matmul {m['size']}^3: {m['tflops']:.3g} TFLOP/s"]
    updates = [r for name in ("update", "liger") for r in s.get(name, {}).get("rows", [])]
    if updates:
        lines += ["", "| update | rows | variant | precision | tok/s | / bare | share of "
                  "matmul rate | peak GiB | checkpointing | note |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        bare = {(r["model"], r["rows"]): r.get("tok_s") for r in updates
                if r["variant"] == "bare"}
        for r in updates:
            base = bare.get((r["model"], r["rows"]))
            ratio = f"{r['tok_s'] / base:.2f}x" if base and "tok_s" in r else "-"
            lines.append(f"| {r['model']} | {r['rows']} | {r['variant']} | "
                         f"{r.get('precision', '-')} | {_n(r, 'tok_s')} | {ratio} | "
                         f"{_n(r, 'share', '{:.0%}')} | {_n(r, 'peak_gib', '{:.1f}')} | "
                         f"{ON_OFF.get(r.get('checkpointing'), '-')} | {r.get('error', '')} |")
    decode = s.get("decode", {}).get("rows", [])
    if decode:
        lines += ["", "| decode (SmolLM2-135M arch.) | rows | ms a step | tok/s | steps | "
                  "first call s | graphs a shape | fallbacks | graph breaks | cache GiB, "
                  "in the update | note |", "|---|---|---|---|---|---|---|---|---|---|---|"]
        lines += [f"| {r['path']} | {r['rows']} | {_n(r, 'ms_step', '{:.2f}')} | "
                  f"{_n(r, 'tok_s')} | {_n(r, 'steps')} | {_n(r, 'first_s', '{:.1f}')} | "
                  f"{r.get('graphs', '-')} | {_n(r, 'fallbacks')} | {_n(r, 'graph_breaks')} | "
                  f"{_n(r, 'held_gib', '{:.2f}')}, {_n(r, 'held_in_update_gib', '{:.2f}')} | "
                  f"{r.get('error', '')} |" for r in decode]
    lines += _layouts(s.get("layouts", {}).get("rows", []))
    for name, text in (("default", _default), ("tests", _tests)):
        if s.get(name, {}).get("rows"):
            lines += ["", text(s[name]["rows"][0])]
    lines += _recipes(s.get("recipe", {}).get("rows", []))
    lines += _anchor(s.get("trl", {}).get("rows", []))
    return "\n".join(lines)


def _layouts(rows: list[dict]) -> list[str]:
    if not rows:
        return []
    padded = {r["shape"]: r for r in rows if r.get("layout") == "padded" and "seconds" in r}
    out = ["", "| layouts | shape | layout (attention) | positions | update s | / padded | "
           "peak GiB | micro-batch step 1 -> later | note |", "|---" * 9 + "|"]
    for r in rows:
        base = padded.get(r.get("shape"))
        ratio = f"{r['seconds'] / base['seconds']:.2f}x" if base and "seconds" in r else "-"
        micro = f"{r.get('micro_batch_step1') or '-'} -> " \
            f"{r.get('micro_batch_tokens') or r.get('micro_batch_size') or '-'}"
        layout = r.get("layout", "-") + (f" ({r['kernel']})" if r.get("kernel", "-") != "-"
                                         else "")
        out.append(f"| {r['model']} | {r.get('shape', '-')} | {layout} | "
                   f"{_n(r, 'positions', '{:.0f}')} | {_n(r, 'seconds', '{:.3f}')} | {ratio} | "
                   f"{_n(r, 'peak_gib', '{:.1f}')} | {micro} | {r.get('error', '')} |")
    return out


def _default(r: dict) -> str:
    evals = ", ".join(f"{acc:.1%} at {t:.0f} s" for t, acc in r["evals"]) or "no evaluation"
    return (f"embedded default (`pods train`): {r['steps']} steps, "
            f"{_n(r, 'train_s', '{:.1f}')} training s, {r['wall_s']:.0f} s wall"
            f"{'' if r['finished'] else ' (stopped at its share)'}; accuracy: {evals}"
            + (f"; {r['error']}" if "error" in r else ""))


def _tests(r: dict) -> str:
    counts = ", ".join(f"{r[k]} {k}" for k in ("passed", "failed", "skipped") if k in r)
    return f"device tests ({', '.join(r['files'])}): {counts or 'no counts'}; {r['summary']}"


def _recipes(rows: list[dict]) -> list[str]:
    if not rows:
        return []
    lines = ["", "| recipe | seed | training s | start | evaluations (training s: accuracy) | "
             "s to 60% | best | steps | s a step | note |", "|---" * 10 + "|"]
    pct = "{:.1%}"
    for r in rows:
        evals = ", ".join(f"{t:.0f}: {a:.1%}" for t, a in r.get("evals", [])) or "-"
        lines.append(f"| {r['recipe']} | {r['seed']} | {_n(r, 'train_s', '{:.0f}')} | "
                     f"{_n(r, 'start', pct)} | {evals} | {_n(r, 'to_target_s', '{:.0f}')} | "
                     f"{_n(r, 'best', pct)} | {_n(r, 'steps')} | {_n(r, 's_step', '{:.2f}')} "
                     f"| {r.get('error', '')} |")
    return lines


def _anchor(rows: list[dict]) -> list[str]:
    if not rows:
        return []
    lines = ["", "| anchor | s per 256 rollouts (a pods step, a TRL generation batch) | s an "
             "optimizer step | generate s | update s | note |", "|---|---|---|---|---|---|"]
    by = {r["method"]: r for r in rows}
    for r in rows:
        whole = r.get("s_step") if r["method"] == "pods" else r.get("s_generation")
        whole = "-" if whole is None else f"{whole:.2f}"
        lines.append(f"| {r['method']} | {whole} | {_n(r, 's_step', '{:.2f}')} | "
                     f"{_n(r, 'generate', '{:.2f}')} | {_n(r, 'update', '{:.2f}')} | "
                     f"{r.get('error', r.get('note', ''))} |")
    pods, trl = by.get("pods", {}), next((r for r in rows if r["method"] != "pods"), {})
    if "s_step" in pods and "s_generation" in trl:
        lines += ["", f"pods step / TRL generation batch: "
                  f"{pods['s_step'] / trl['s_generation']:.2f}x"]
    return lines


def _n(values: dict, key: str, fmt: str = "{:,.0f}") -> str:
    value = values.get(key)
    return "-" if value is None else fmt.format(value)
