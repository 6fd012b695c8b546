"""Fixed-width text tables and the geometric mean, for benchmark reports."""
import math


def geomean(values) -> float:
    """Geometric mean of the positive numbers in ``values``; None entries are skipped.

    Returns NaN when nothing is left. Raises ValueError on a zero, negative or NaN value.
    """
    logs = []
    for v in values:
        if v is None:
            continue
        v = float(v)
        if not v > 0.0:
            raise ValueError(f"geomean: values must be positive (or None to skip); got {v!r}.")
        logs.append(math.log(v))
    return math.exp(sum(logs) / len(logs)) if logs else float("nan")


def format_table(headers, rows, aligns=None, sep: str = " | ") -> str:
    """Render ``rows`` (sequences of cells, converted with ``str``) under ``headers``.

    Every column is as wide as its widest cell; ``aligns`` is a string or list with one of
    ``"<"`` (left) or ``">"`` (right, the default) per column. Short rows are padded with
    empty cells. A dashed rule separates the header from the body.
    """
    headers = [str(h) for h in headers]
    num_cols = len(headers)
    body = []
    for row in rows:
        cells = [str(c) for c in row]
        if len(cells) > num_cols:
            raise ValueError(
                f"format_table: a row has {len(cells)} cells but there are {num_cols} headers: {cells!r}."
            )
        body.append(cells + [""] * (num_cols - len(cells)))
    aligns = list(aligns) if aligns is not None else [">"] * num_cols
    if len(aligns) != num_cols or any(a not in "<>" for a in aligns):
        raise ValueError(f"format_table: aligns must give '<' or '>' for each of {num_cols} columns; got {aligns!r}.")
    widths = [max([len(headers[i])] + [len(r[i]) for r in body]) for i in range(num_cols)]

    def line(cells):
        return sep.join(f"{c:{a}{w}}" for c, a, w in zip(cells, aligns, widths)).rstrip()

    rule = sep.replace("|", "+").replace(" ", "-")
    lines = [line(headers), rule.join("-" * w for w in widths)]
    lines += [line(r) for r in body]
    return "\n".join(lines)


def print_table(headers, rows, aligns=None, sep: str = " | ", file=None) -> None:
    """Print :func:`format_table` of the same arguments (to ``file``, default stdout)."""
    print(format_table(headers, rows, aligns, sep), file=file)
