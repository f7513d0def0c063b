"""Plots for the report scripts, bench/numerics_report.py (docs/numerics.md) and
bench/demo_report.py (docs/demo.md): SVG files written by this module alone, with the Python
standard library, so that `make demo` and `make numerics` need no plotting program.

A figure is one or more panels side by side (Axes), each with its own axes, linear or
logarithmic, ticks at round values (or at powers of the log base), a grid, a title, axis labels
and a legend of the labelled series. Series: lines (solid or dashed, optionally with markers),
steps, boxes (a histogram's bars) and single points; vertical marker lines with a label. Text
takes gnuplot's "enhanced" markup where a caller asks for it: x^{...} or x^y for a superscript,
x_{...} or x_y for a subscript. A point whose y is None or NaN, or not positive on a log axis,
breaks its line: nothing is drawn there.
"""
import math
import os

COLORS = ["#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02", "#a6761d", "#666666"]

FONT = "DejaVu Sans, Helvetica, Arial, sans-serif"
# Text widths are estimated (no font metrics here), which is enough to size legend boxes.
CHAR_WIDTH = 0.58  # of the font size, for a typical sans-serif character


def _esc(s):
    return str(s).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


def _num(v):
    """A coordinate with at most one decimal, without a trailing .0."""
    r = round(v, 1)
    return str(int(r)) if r == int(r) else f"{r:.1f}"


def parse_enhanced(text):
    """[(piece, shift)] with shift 0 (normal), 1 (superscript) or -1 (subscript), from gnuplot's
    enhanced markup: ^{...} / _{...} (or ^x / _x, one character) raise or lower a piece."""
    runs, i, plain = [], 0, []
    while i < len(text):
        c = text[i]
        if c in "^_" and i + 1 < len(text):
            if plain:
                runs.append(("".join(plain), 0))
                plain = []
            shift = 1 if c == "^" else -1
            if text[i + 1] == "{":
                end = text.find("}", i + 2)
                end = len(text) if end < 0 else end
                runs.append((text[i + 2:end], shift))
                i = end + 1
            else:
                runs.append((text[i + 1], shift))
                i += 2
            continue
        plain.append(c)
        i += 1
    if plain:
        runs.append(("".join(plain), 0))
    return runs


def text_width(text, size, enhanced=True):
    runs = parse_enhanced(text) if enhanced else [(text, 0)]
    return sum(len(p) * size * CHAR_WIDTH * (0.75 if s else 1.0) for p, s in runs)


def svg_text(x, y, text, size=12, anchor="start", color="#000000", rotate=False, enhanced=True, weight=None):
    """A <text> element at (x, y) (its baseline), rotated to read upwards when rotate is set."""
    attrs = [f'x="{_num(x)}"', f'y="{_num(y)}"', f'font-size="{size}"', f'text-anchor="{anchor}"']
    if color != "#000000":
        attrs.append(f'fill="{color}"')
    if weight:
        attrs.append(f'font-weight="{weight}"')
    if rotate:
        attrs.append(f'transform="rotate(-90 {_num(x)} {_num(y)})"')
    body, level = [], 0
    runs = parse_enhanced(text) if enhanced else [(text, 0)]
    if len(runs) > 1:  # spaces at the ends of pieces are kept (dropped between tspans otherwise)
        attrs.append('xml:space="preserve"')
    for piece, shift in runs:
        # each piece moves the baseline from the previous piece's to its own (dy, in ems)
        dy = {1: -0.4, 0: 0.0, -1: 0.25}[shift] - {1: -0.4, 0: 0.0, -1: 0.25}[level]
        extra = f' dy="{dy:.2f}em"' if dy else ""
        small = ' font-size="75%"' if shift else ""
        body.append(f"<tspan{extra}{small}>{_esc(piece)}</tspan>" if (extra or small) else _esc(piece))
        level = shift
    return f"<text {' '.join(attrs)}>{''.join(body)}</text>"


class Scale:
    """Data to pixels along one axis: linear, or logarithmic in base `log`."""

    def __init__(self, lo, hi, p0, p1, log=None):
        self.lo, self.hi, self.p0, self.p1, self.log = lo, hi, p0, p1, log

    def _t(self, v):
        return math.log(v, self.log) if self.log else v

    def __call__(self, v):
        a, b = self._t(self.lo), self._t(self.hi)
        return self.p0 + (self._t(v) - a) / (b - a) * (self.p1 - self.p0)


def nice_step(span):
    """A round tick spacing for a range of this span: gnuplot's rule (quantize_normal_tics), so
    that the plots space their ticks as the gnuplot ones before them did: 1, 2 or 5 times a
    power of 10, about 4 to 10 intervals."""
    power = 10 ** math.floor(math.log10(span))
    intervals = 20 / (span / power)
    for more, m in ((40, 0.05), (20, 0.1), (10, 0.2), (4, 0.5), (2, 1), (0.5, 2)):
        if intervals > more:
            return m * power
    return math.ceil(span / power) * power


def linear_ticks(lo, hi, step):
    first = math.ceil(lo / step - 1e-9)
    last = math.floor(hi / step + 1e-9)
    return [k * step for k in range(first, last + 1)]


def format_linear(v, step):
    decimals = max(0, -math.floor(math.log10(step) + 1e-9))
    s = f"{v:.{decimals}f}"
    return "0" if float(s) == 0 else s


def log_ticks(lo, hi, base, most=12):
    """Powers of base within [lo, hi], every k-th one so that at most `most` remain."""
    a, b = math.ceil(math.log(lo, base) - 1e-9), math.floor(math.log(hi, base) + 1e-9)
    k = max(1, math.ceil((b - a + 1) / most))
    return [e for e in range(a, b + 1) if e % k == 0]


def finite(v):
    return v is not None and not (isinstance(v, float) and (math.isnan(v) or math.isinf(v)))


class Axes:
    """One panel. xlog / ylog: None (linear) or the log base; xrange / yrange: (lo, hi), or None
    to fit the data (extended to whole ticks on a linear axis, whole powers on a log one; also
    when the range given is empty or not finite); key:
    where the legend goes ("top left", "top right", "bottom right", "bottom left"); headroom: a
    fraction of the y range added above the data (room for labels)."""

    def __init__(self, title="", xlabel="", ylabel="", xlog=None, ylog=None, xrange=None, yrange=None,
                 key="top right", headroom=0.0):
        self.title, self.xlabel, self.ylabel = title, xlabel, ylabel
        self.xlog, self.ylog, self.xrange, self.yrange = xlog, ylog, xrange, yrange
        self.key, self.headroom = key, headroom
        self.items = []   # drawn in order
        self.marks = []   # vertical lines with labels, drawn over the series

    def line(self, pts, label=None, color=COLORS[0], width=2.0, dash=None, marker=None, steps=False,
             enhanced=False):
        """A polyline through pts [(x, y)]; steps: horizontal to the next x, then vertical (gnuplot's
        "steps"); marker: None, "circle", "square", "triangle", "diamond", "cross" or "plus" at each point."""
        self.items.append(("line", dict(pts=list(pts), label=label, color=color, width=width, dash=dash,
                                        marker=marker, steps=steps, enhanced=enhanced)))

    def boxes(self, pts, label=None, color=COLORS[0], width=0.9, enhanced=False):
        """Bars of the given width (in x units) centred on each x, from the axis's bottom to y."""
        self.items.append(("boxes", dict(pts=list(pts), label=label, color=color, width=width, enhanced=enhanced)))

    def points(self, pts, color="#000000", marker="circle", size=5.0):
        self.items.append(("points", dict(pts=list(pts), color=color, marker=marker, size=size)))

    def vline(self, x, color="#666666", width=1.0, dash=None, text=None, text_x=None, text_y=0.9, rotate=False):
        """A vertical line at x across the panel; text at (text_x, text_y), text_x in x units (x
        itself when None) and text_y a fraction of the panel's height from its bottom."""
        self.marks.append(dict(x=x, color=color, width=width, dash=dash, text=text,
                               text_x=x if text_x is None else text_x, text_y=text_y, rotate=rotate))

    # ---- ranges

    def _values(self, axis):
        vals = []
        log = self.xlog if axis == 0 else self.ylog
        for kind, it in self.items:
            for p in it["pts"]:
                v = p[axis]
                if finite(v) and (not log or v > 0):
                    vals.append(float(v))
            if kind == "boxes" and axis == 0:
                vals += [float(p[0]) + s * it["width"] / 2 for p in it["pts"] if finite(p[0]) for s in (-1, 1)]
        if axis == 0:
            vals += [m["x"] for m in self.marks]
        return vals

    def _range(self, axis):
        given = self.xrange if axis == 0 else self.yrange
        log = self.xlog if axis == 0 else self.ylog
        if given and finite(given[0]) and finite(given[1]) and given[0] < given[1] and (not log or given[0] > 0):
            return float(given[0]), float(given[1])
        vals = self._values(axis) or [1.0, 10.0]
        if axis == 1 and not log and any(kind == "boxes" for kind, _ in self.items):
            vals.append(0.0)  # bars stand on zero
        lo, hi = min(vals), max(vals)
        if log:
            lo, hi = log ** math.floor(math.log(lo, log) + 1e-9), log ** math.ceil(math.log(hi, log) - 1e-9)
            if lo == hi:
                lo, hi = lo / log, hi * log
            if axis == 1 and self.headroom:
                hi = log ** (math.log(hi, log) + self.headroom * math.log(hi / lo, log))
            return lo, hi
        if lo == hi:
            lo, hi = lo - 1, hi + 1
        if axis == 1 and self.headroom:
            hi += self.headroom * (hi - lo)
        step = nice_step(hi - lo)
        return math.floor(lo / step + 1e-9) * step, math.ceil(hi / step - 1e-9) * step

    # ---- drawing

    def render(self, x0, y0, w, h, font=12):
        """SVG elements for the panel in the box (x0, y0, w, h) of the figure."""
        left, right, top, bottom = 74, 16, 30 if self.title else 12, 46
        px0, px1, py0, py1 = x0 + left, x0 + w - right, y0 + top, y0 + h - bottom
        (xlo, xhi), (ylo, yhi) = self._range(0), self._range(1)
        sx, sy = Scale(xlo, xhi, px0, px1, self.xlog), Scale(ylo, yhi, py1, py0, self.ylog)
        out = []
        clip = f"clip{int(x0)}_{int(y0)}"
        out.append(f'<clipPath id="{clip}"><rect x="{_num(px0)}" y="{_num(py0)}" width="{_num(px1 - px0)}" '
                   f'height="{_num(py1 - py0)}"/></clipPath>')
        # grid and ticks
        for axis, (lo, hi, log, sc) in enumerate(((xlo, xhi, self.xlog, sx), (ylo, yhi, self.ylog, sy))):
            if log:
                ticks = [(log ** e, f"{log}^{{{e}}}") for e in log_ticks(lo, hi, log)]
            else:
                step = nice_step(hi - lo)
                ticks = [(v, format_linear(v, step)) for v in linear_ticks(lo, hi, step)]
            for v, text in ticks:
                p = sc(v)
                if axis == 0:
                    out.append(f'<line x1="{_num(p)}" y1="{_num(py0)}" x2="{_num(p)}" y2="{_num(py1)}" '
                               f'stroke="#d0d0d0" stroke-width="0.8" stroke-dasharray="2,3"/>')
                    out.append(svg_text(p, py1 + font + 4, text, font - 1, "middle"))
                else:
                    out.append(f'<line x1="{_num(px0)}" y1="{_num(p)}" x2="{_num(px1)}" y2="{_num(p)}" '
                               f'stroke="#d0d0d0" stroke-width="0.8" stroke-dasharray="2,3"/>')
                    out.append(svg_text(px0 - 5, p + font * 0.35, text, font - 1, "end"))
        out.append(f'<rect x="{_num(px0)}" y="{_num(py0)}" width="{_num(px1 - px0)}" height="{_num(py1 - py0)}" '
                   f'fill="none" stroke="#000000" stroke-width="1"/>')
        # series
        body = []
        for kind, it in self.items:
            body += getattr(self, "_draw_" + kind)(it, sx, sy, py1)
        for m in self.marks:
            p = sx(m["x"])
            dash = f' stroke-dasharray="{m["dash"]}"' if m["dash"] else ""
            body.append(f'<line x1="{_num(p)}" y1="{_num(py0)}" x2="{_num(p)}" y2="{_num(py1)}" stroke="{m["color"]}" '
                        f'stroke-width="{m["width"]}"{dash}/>')
        out.append(f'<g clip-path="url(#{clip})">' + "".join(body) + "</g>")
        for m in self.marks:
            if m["text"]:
                tx, ty = sx(m["text_x"]), py1 - m["text_y"] * (py1 - py0)
                out.append(svg_text(tx, ty, m["text"], font - 1, "start", m["color"], rotate=m["rotate"]))
        # labels and title
        if self.title:
            out.append(svg_text((px0 + px1) / 2, y0 + top - 10, self.title, font + 1, "middle"))
        if self.xlabel:
            out.append(svg_text((px0 + px1) / 2, py1 + 2 * font + 12, self.xlabel, font, "middle"))
        if self.ylabel:
            out.append(svg_text(x0 + font + 2, (py0 + py1) / 2, self.ylabel, font, "middle", rotate=True))
        out += self._legend(px0, px1, py0, py1, font - 1)
        return out

    def _path(self, pts, sx, sy, steps):
        """Polylines through pts, broken where a point cannot be drawn."""
        runs, cur = [], []
        ok = lambda x, y: finite(x) and finite(y) and (not self.xlog or x > 0) and (not self.ylog or y > 0)
        for x, y in pts:
            if not ok(x, y):
                if cur:
                    runs.append(cur)
                cur = []
                continue
            X, Y = sx(x), sy(y)
            if steps and cur:
                cur.append((X, cur[-1][1]))
            cur.append((X, Y))
        if cur:
            runs.append(cur)
        return runs

    def _draw_line(self, it, sx, sy, _):
        out = []
        dash = f' stroke-dasharray="{it["dash"]}"' if it["dash"] else ""
        for run in self._path(it["pts"], sx, sy, it["steps"]):
            d = " ".join(f"{_num(x)},{_num(y)}" for x, y in run)
            out.append(f'<polyline points="{d}" fill="none" stroke="{it["color"]}" stroke-width="{it["width"]}" '
                       f'stroke-linejoin="round"{dash}/>')
        if it["marker"]:
            for run in self._path(it["pts"], sx, sy, False):
                out += [marker(it["marker"], x, y, 4.5, it["color"]) for x, y in run]
        return out

    def _draw_boxes(self, it, sx, sy, base):
        out = []
        for x, y in it["pts"]:
            if not (finite(x) and finite(y)) or (self.ylog and y <= 0):
                continue
            a, b = sx(x - it["width"] / 2), sx(x + it["width"] / 2)
            top = sy(y)
            out.append(f'<rect x="{_num(a)}" y="{_num(min(top, base))}" width="{_num(b - a)}" '
                       f'height="{_num(abs(base - top))}" fill="{it["color"]}" fill-opacity="0.6" '
                       f'stroke="{it["color"]}" stroke-width="1"/>')
        return out

    def _draw_points(self, it, sx, sy, _):
        return [marker(it["marker"], x, y, it["size"], it["color"]) for run in self._path(it["pts"], sx, sy, False)
                for x, y in run]

    def _legend(self, px0, px1, py0, py1, size):
        entries = [(kind, it) for kind, it in self.items if it.get("label")]
        if not entries:
            return []
        row, sample, pad = size + 6, 30, 6
        width = pad * 3 + sample + max(text_width(it["label"], size, it["enhanced"]) for _, it in entries)
        height = pad * 2 + row * len(entries) - 4
        x = px0 + 8 if "left" in self.key else px1 - 8 - width
        y = py0 + 8 if "top" in self.key else py1 - 8 - height
        out = [f'<rect x="{_num(x)}" y="{_num(y)}" width="{_num(width)}" height="{_num(height)}" fill="#ffffff" '
               f'fill-opacity="0.92" stroke="#000000" stroke-width="0.8"/>']
        for i, (kind, it) in enumerate(entries):
            cy = y + pad + row * i + row / 2 - 2
            a, b = x + pad, x + pad + sample
            if kind == "boxes":
                out.append(f'<rect x="{_num(a)}" y="{_num(cy - 5)}" width="{sample}" height="10" fill="{it["color"]}" '
                           f'fill-opacity="0.6" stroke="{it["color"]}"/>')
            else:
                dash = f' stroke-dasharray="{it["dash"]}"' if it["dash"] else ""
                out.append(f'<line x1="{_num(a)}" y1="{_num(cy)}" x2="{_num(b)}" y2="{_num(cy)}" stroke="{it["color"]}" '
                           f'stroke-width="{it["width"]}"{dash}/>')
                if it["marker"]:
                    out.append(marker(it["marker"], (a + b) / 2, cy, 4.5, it["color"]))
            out.append(svg_text(b + pad, cy + size * 0.35, it["label"], size, "start", enhanced=it["enhanced"]))
        return out


def marker(kind, x, y, r, color):
    """A filled marker of half-size r at (x, y)."""
    fill = f'fill="{color}" stroke="{color}"'
    if kind == "circle":
        return f'<circle cx="{_num(x)}" cy="{_num(y)}" r="{_num(r)}" {fill}/>'
    if kind == "square":
        return f'<rect x="{_num(x - r)}" y="{_num(y - r)}" width="{_num(2 * r)}" height="{_num(2 * r)}" {fill}/>'
    if kind in ("triangle", "diamond"):
        pts = [(x, y - r * 1.2), (x + r * 1.1, y + r * 0.8), (x - r * 1.1, y + r * 0.8)] if kind == "triangle" else \
              [(x, y - r * 1.3), (x + r, y), (x, y + r * 1.3), (x - r, y)]
        return f'<polygon points="{" ".join(f"{_num(a)},{_num(b)}" for a, b in pts)}" {fill}/>'
    if kind in ("cross", "plus"):
        if kind == "cross":
            segs = [(x - r, y - r, x + r, y + r), (x - r, y + r, x + r, y - r)]
        else:
            segs = [(x - r, y, x + r, y), (x, y - r, x, y + r)]
        return "".join(f'<line x1="{_num(a)}" y1="{_num(b)}" x2="{_num(c)}" y2="{_num(d)}" stroke="{color}" '
                       f'stroke-width="1.6"/>' for a, b, c, d in segs)
    raise ValueError(f"plotting: unknown marker {kind!r}; expected circle, square, triangle, diamond, cross or plus")


MARKERS = ["square", "circle", "triangle", "diamond", "cross", "plus"]


def figure(path, panels, size=(900, 450), font=12):
    """Writes the panels (Axes), side by side in equal widths, as an SVG file of size (w, h)."""
    w, h = size
    each = w / len(panels)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" '
           f'font-family="{FONT}">', f'<rect width="{w}" height="{h}" fill="#ffffff"/>']
    for i, ax in enumerate(panels):
        out += ax.render(i * each, 0, each, h, font)
    out.append("</svg>")
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(out) + "\n")


def fp16_threshold_marks(ax, text_y=(0.93, 0.84), rotate=False, text_dx=0.5):
    """Dashed verticals at fp16's smallest normal (2^-14) and smallest subnormal (2^-24), on an x
    axis of binades e (|x| in [2^e, 2^(e+1)))."""
    ax.vline(-14, "#d95f02", 2, "6,4", "fp16 smallest normal 2^{-14}", -14 + text_dx, text_y[0], rotate)
    ax.vline(-24, "#7570b3", 2, "6,4", "fp16 smallest subnormal 2^{-24}", -24 + text_dx, text_y[1], rotate)


def exponent_histogram(path, series, title, ylabel="count", size=(900, 400)):
    """Counts per binade with fp16's thresholds marked. series: [(label, {binade: value})]; one
    series is drawn as boxes, several as steps (binade e over [e - 0.5, e + 0.5))."""
    ax = Axes(title, "binade e (|x| in [2^e, 2^{e+1}))", ylabel, key="top left", headroom=0.35)
    for i, (label, counts) in enumerate(series):
        pts = sorted(counts.items())
        color = COLORS[i % len(COLORS)]
        if len(series) == 1:
            ax.boxes(pts, label, color)
        else:
            if pts:  # the last binade's step closes at its right edge
                pts = [(e - 0.5, v) for e, v in pts] + [(pts[-1][0] + 0.5, pts[-1][1])]
            ax.line(pts, label, color, steps=True)
    fp16_threshold_marks(ax)
    figure(path, [ax], size)


def line_plot(path, series, title, xlabel, ylabel, logy=False, yrange=None, size=(900, 450)):
    """series: [(label, [(x, y), ...])], one line each; yrange: (lo, hi) or None to fit the data."""
    ax = Axes(title, xlabel, ylabel, ylog=10 if logy else None, yrange=yrange, key="top right")
    for i, (label, pts) in enumerate(series):
        ax.line(pts, label, COLORS[i % len(COLORS)])
    figure(path, [ax], size)
