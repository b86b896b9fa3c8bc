//! A small SVG writer for the pool part's plots: step lines (a value held until its next change)
//! over time, with a legend, a dashed reference line and a marked instant. Hand-written: a plotting
//! crate would bring a font and raster stack for a polyline.

use std::fmt::Write;

/// One step line.
pub struct Line<'a> {
    pub label: &'a str,
    /// (x, y) at each change, x ascending; held until the next one and to the plot's end.
    pub points: &'a [(f64, f64)],
}

/// Line colours, in turn.
const COLOURS: [&str; 4] = ["#236", "#d80", "#829", "#5a5"];

/// What to draw.
pub struct StepPlot<'a> {
    pub title: &'a str,
    pub y_label: &'a str,
    pub lines: Vec<Line<'a>>,
    pub x_end: f64,
    /// A horizontal dashed line (e.g. the desired level) and its label.
    pub reference: Option<(f64, &'a str)>,
    /// A vertical line (e.g. the end of the drain) and its label.
    pub mark: Option<(f64, &'a str)>,
}

const W: f64 = 760.0;
const H: f64 = 340.0;
const LEFT: f64 = 60.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 70.0;

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// A step of 1, 2 or 5 × 10ⁿ giving at most `n` intervals over `span`.
fn tick_step(span: f64, n: f64) -> f64 {
    let raw = (span / n).max(1e-9);
    let p = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * p)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * p)
}

impl StepPlot<'_> {
    /// The SVG document.
    pub fn render(&self) -> String {
        let points = || self.lines.iter().flat_map(|l| l.points.iter());
        let x_max = points().map(|p| p.0).fold(self.x_end, f64::max).max(1.0);
        let y_top = points()
            .map(|p| p.1)
            .chain(self.reference.map(|r| r.0))
            .fold(1.0_f64, f64::max)
            * 1.15;
        let (pw, ph) = (W - LEFT - RIGHT, H - TOP - BOTTOM);
        let x = |v: f64| LEFT + v / x_max * pw;
        let y = |v: f64| TOP + ph - v / y_top * ph;
        let mut o = String::new();
        let _ = write!(
            o,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{H}\" viewBox=\"0 0 {W} {H}\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"{W}\" height=\"{H}\" fill=\"white\"/>\n<text x=\"{LEFT}\" y=\"22\" font-size=\"14\">{}</text>\n",
            escape(self.title)
        );
        let step = tick_step(x_max, 8.0);
        let mut t = 0.0;
        while t <= x_max + 1e-9 {
            let _ = writeln!(
                o,
                "<line x1=\"{0:.1}\" y1=\"{1:.1}\" x2=\"{0:.1}\" y2=\"{2:.1}\" stroke=\"#ddd\"/><text x=\"{0:.1}\" y=\"{3:.1}\" text-anchor=\"middle\">{t}</text>",
                x(t),
                TOP,
                TOP + ph,
                TOP + ph + 16.0
            );
            t += step;
        }
        let ystep = tick_step(y_top, 4.0);
        let mut v = 0.0;
        while v <= y_top + 1e-9 {
            let _ = writeln!(
                o,
                "<line x1=\"{LEFT}\" y1=\"{0:.1}\" x2=\"{1:.1}\" y2=\"{0:.1}\" stroke=\"#ddd\"/><text x=\"{2:.1}\" y=\"{3:.1}\" text-anchor=\"end\">{v:.2}</text>",
                y(v),
                LEFT + pw,
                LEFT - 6.0,
                y(v) + 4.0
            );
            v += ystep;
        }
        let _ = writeln!(
            o,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">seconds since the drain started</text>\n<text transform=\"translate(16,{:.1}) rotate(-90)\" text-anchor=\"middle\">{}</text>",
            LEFT + pw / 2.0,
            H - 10.0,
            TOP + ph / 2.0,
            escape(self.y_label)
        );
        if let Some((r, label)) = self.reference {
            let _ = writeln!(
                o,
                "<line x1=\"{LEFT}\" y1=\"{0:.1}\" x2=\"{1:.1}\" y2=\"{0:.1}\" stroke=\"#2a7\" stroke-dasharray=\"6 4\"/><text x=\"{1:.1}\" y=\"{2:.1}\" text-anchor=\"end\" fill=\"#2a7\">{3}</text>",
                y(r),
                LEFT + pw,
                y(r) - 4.0,
                escape(label)
            );
        }
        if let Some((m, label)) = self.mark {
            // The label on the side of the line with room for it.
            let (lx, anchor) = if x(m) > LEFT + pw * 0.8 {
                (x(m) - 4.0, "end")
            } else {
                (x(m) + 4.0, "start")
            };
            let _ = writeln!(
                o,
                "<line x1=\"{0:.1}\" y1=\"{TOP}\" x2=\"{0:.1}\" y2=\"{1:.1}\" stroke=\"#c33\" stroke-dasharray=\"3 3\"/><text x=\"{lx:.1}\" y=\"{2:.1}\" text-anchor=\"{anchor}\" fill=\"#c33\">{3}</text>",
                x(m),
                TOP + ph,
                TOP + 12.0,
                escape(label)
            );
        }
        for (i, line) in self.lines.iter().enumerate() {
            let colour = COLOURS[i % COLOURS.len()];
            let mut path = String::new();
            let mut last: Option<f64> = None;
            for (px, py) in line.points {
                if let Some(prev) = last {
                    let _ = write!(path, " {:.1},{:.1}", x(*px), y(prev));
                }
                let _ = write!(path, " {:.1},{:.1}", x(*px), y(*py));
                last = Some(*py);
            }
            if let Some(prev) = last {
                let _ = write!(path, " {:.1},{:.1}", x(x_max), y(prev));
            }
            let ly = TOP + ph + 36.0;
            let lx = LEFT + (i as f64) * pw / self.lines.len().max(1) as f64;
            let _ = writeln!(
                o,
                "<polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"{}\" points=\"{}\"/>\n<rect x=\"{lx:.1}\" y=\"{:.1}\" width=\"14\" height=\"4\" fill=\"{colour}\"/><text x=\"{:.1}\" y=\"{:.1}\">{}</text>",
                2.5 - i as f64 * 0.5,
                path.trim(),
                ly - 4.0,
                lx + 18.0,
                ly,
                escape(line.label)
            );
        }
        o + "</svg>\n"
    }
}
