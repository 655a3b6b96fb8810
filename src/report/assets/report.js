// gpu-basics report: creates the Chart.js charts whose configurations the report embeds
// (#gb-charts), adding what JSON cannot carry: tick and tooltip formatters for each axis unit,
// the theme's colours (light, dark, print), heatmap cell colours and the labels' opaque grounds.
// No chart is drawn here.
(function () {
  'use strict';
  const specs = JSON.parse(document.getElementById('gb-charts').textContent);

  const trim = (v) => Number(v.toPrecision(3)).toString();
  function bytes(v) {
    const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let i = 0;
    let x = Math.abs(v);
    while (x >= 1024 && i < units.length - 1) { x /= 1024; i += 1; }
    return (v < 0 ? '-' : '') + trim(x) + ' ' + units[i];
  }
  function seconds(v) {
    const a = Math.abs(v);
    if (a === 0) return '0 s';
    if (a < 1e-6) return trim(v * 1e9) + ' ns';
    if (a < 1e-3) return trim(v * 1e6) + ' \u00b5s';
    if (a < 1) return trim(v * 1e3) + ' ms';
    return trim(v) + ' s';
  }
  function formatter(unit) {
    if (unit === 'bytes') return bytes;
    if (unit === 'seconds') return seconds;
    return (v) => Number(v).toLocaleString('en-US', { maximumSignificantDigits: 4 }) +
      (unit ? ' ' + unit : '');
  }

  function configureScale(scale) {
    const unit = scale.gbUnit;
    if (unit === undefined || scale.type === 'category') return;
    const format = formatter(unit);
    if (scale.type === 'logarithmic') {
      if (unit === 'bytes') {
        // Powers of two, every second one when the range is wide.
        scale.afterBuildTicks = (axis) => {
          const lo = Math.ceil(Math.log2(Math.max(axis.min, 1)));
          const hi = Math.floor(Math.log2(axis.max));
          const step = hi - lo > 12 ? 4 : (hi - lo > 6 ? 2 : 1);
          const ticks = [];
          for (let e = lo; e <= hi; e += 1) if ((e - lo) % step === 0) ticks.push({ value: 2 ** e });
          axis.ticks = ticks;
        };
        scale.ticks = Object.assign({}, scale.ticks, { callback: (v) => format(v) });
      } else {
        // Label 1, 2 and 5 times a power of ten only, in the axis' unit. (Chart.js's own log
        // formatter also labels every tick in the top fifth of the axis, which crowds it.)
        const round = (v) => {
          if (!(v > 0)) return false;
          const mantissa = Math.round((v / 10 ** Math.floor(Math.log10(v))) * 1000) / 1000;
          return [1, 2, 5, 10].includes(mantissa);
        };
        scale.ticks = Object.assign({}, scale.ticks, {
          // An axis too narrow for any such tick labels its ends.
          callback: (v, i, ticks) =>
            round(v) || (!ticks.some((t) => round(t.value)) && (i === 0 || i === ticks.length - 1))
              ? format(v)
              : '',
        });
      }
    } else if (unit === 'bytes') {
      // Round ticks: whole multiples of 1, 2 or 5 times a power of ten of one binary unit (0,
      // 50, 100 MiB), every label in that unit, the axis' ends moved out to ticks.
      const UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
      const plan = (min, max) => {
        const span = Math.max(max - min, 1);
        let k = Math.min(UNITS.length - 1, Math.floor(Math.log(Math.max(Math.abs(min), Math.abs(max), 1)) / Math.log(1024)));
        let step = 0;
        for (; k >= 0; k -= 1) {
          const rough = span / 1024 ** k / 6;
          const p10 = 10 ** Math.floor(Math.log10(rough));
          step = [1, 2, 5, 10].map((m) => m * p10).find((s) => s >= rough);
          if (step >= 1 || k === 0) break;
        }
        step = Math.max(step, 1);
        return { k, size: step * 1024 ** k };
      };
      scale.afterDataLimits = (axis) => {
        const { size } = plan(axis.min, axis.max);
        axis.min = Math.floor(axis.min / size) * size;
        axis.max = Math.ceil(axis.max / size) * size;
      };
      scale.afterBuildTicks = (axis) => {
        const { k, size } = plan(axis.min, axis.max);
        const ticks = [];
        for (let v = Math.ceil(axis.min / size) * size; v <= axis.max + size * 1e-9; v += size) ticks.push({ value: v });
        axis.ticks = ticks;
        axis.gbTickUnit = k;
      };
      scale.ticks = Object.assign({}, scale.ticks, {
        callback(v) {
          const k = this.gbTickUnit;
          return k === undefined ? format(v) : Math.round(v / 1024 ** k).toString() + ' ' + UNITS[k];
        },
      });
    } else {
      scale.ticks = Object.assign({}, scale.ticks, { callback: (v) => format(v) });
    }
  }

  function valueUnit(config, axisId) {
    const s = config.options.scales[axisId];
    return s && s.gbUnit !== undefined ? s.gbUnit : '';
  }

  function configureTooltip(spec, config) {
    const callbacks = {};
    if (spec.tooltip === 'matrix') {
      callbacks.title = () => '';
      callbacks.label = (ctx) => {
        const d = ctx.raw;
        return d.y + ' \u2192 ' + d.x + ': ' + formatter(ctx.dataset.gbUnit)(d.v);
      };
    } else if (spec.tooltip === 'range') {
      const format = formatter(valueUnit(config, 'x'));
      callbacks.label = (ctx) => {
        const [a, b] = ctx.raw.x;
        return ctx.dataset.label + ': ' + format(a) + ' to ' + format(b) + ' (' + format(b - a) + ')';
      };
    } else {
      const horizontal = spec.tooltip === 'x';
      callbacks.label = (ctx) => {
        const axisId = horizontal ? 'x' : (ctx.dataset.yAxisID || 'y');
        const v = horizontal ? ctx.parsed.x : ctx.parsed.y;
        let text = ctx.dataset.label + ': ' + formatter(valueUnit(config, axisId))(v);
        if (!horizontal && config.options.scales.x.type !== 'category') {
          text += ' at ' + formatter(valueUnit(config, 'x'))(ctx.parsed.x);
        }
        return text;
      };
    }
    config.options.plugins.tooltip = Object.assign({}, config.options.plugins.tooltip, { callbacks });
  }

  function cellColours(config, theme) {
    for (const ds of config.data.datasets) {
      if (config.type !== 'matrix') continue;
      const max = ds.gbMax > 0 ? ds.gbMax : 1;
      ds.backgroundColor = (ctx) => {
        const v = ctx.raw ? ctx.raw.v : 0;
        const a = 0.15 + 0.85 * Math.min(1, v / max);
        return 'rgba(0,114,178,' + a.toFixed(3) + ')';
      };
      ds.borderColor = theme.bg;
      ds.width = (ctx) => (ctx.chart.chartArea || {}).width / ctx.chart.scales.x.ticks.length - 2;
      ds.height = (ctx) => (ctx.chart.chartArea || {}).height / ctx.chart.scales.y.ticks.length - 2;
    }
    if (config.type === 'matrix') {
      config.plugins = [{
        id: 'gbCellValues',
        afterDatasetsDraw(chart) {
          const c = chart.ctx;
          c.save();
          c.fillStyle = '#ffffff';
          c.font = '600 13px system-ui, sans-serif';
          c.textAlign = 'center';
          c.textBaseline = 'middle';
          chart.data.datasets.forEach((ds, i) => {
            chart.getDatasetMeta(i).data.forEach((el, j) => {
              const p = el.getCenterPoint();
              c.fillText(formatter(ds.gbUnit)(ds.data[j].v), p.x, p.y);
            });
          });
          c.restore();
        },
      }];
    }
  }

  function theme() {
    const css = getComputedStyle(document.documentElement);
    return { fg: css.getPropertyValue('--fg').trim(), muted: css.getPropertyValue('--muted').trim(),
      grid: css.getPropertyValue('--grid').trim(), bg: css.getPropertyValue('--bg').trim() };
  }

  // Labels of reference lines and boxes on an opaque ground of the chart's own background, so
  // that a series drawn under a label does not run through its text.
  function labelGrounds(config, theme) {
    const annotations = ((config.options.plugins || {}).annotation || {}).annotations || {};
    for (const a of Object.values(annotations)) {
      const label = a.type === 'label' ? a : a.label;
      if (!label) continue;
      label.backgroundColor = theme.bg;
      label.padding = { x: 4, y: 1 };
      label.borderRadius = 3;
    }
  }

  // A label annotation, or the labels of a line or box.
  const labelsOf = (a) => (a.constructor.id === 'labelAnnotation' ? [a] : a.elements || []);

  // Labels apart: once the annotation plugin has placed the labels, one drawn over an earlier
  // label moves to the nearest free place inside the chart area, along its own line first (a
  // line's label stays by its line), then across it; where there is none, it is not drawn.
  const labelsApart = {
    id: 'gbLabelsApart',
    afterUpdate(chart) {
      const plugin = Chart.registry.getPlugin('annotation');
      if (!plugin) return;
      const area = chart.chartArea;
      const gap = 3;
      const placed = [];
      const hits = (b) => placed.some((p) => b.x < p.x2 && p.x < b.x2 && b.y < p.y2 && p.y < b.y2);
      const inside = (b) => b.x >= area.left - 1 && b.x2 <= area.right + 1 &&
        b.y >= area.top - 1 && b.y2 <= area.bottom + 1;
      const moved = (b, m) => ({ x: b.x + m.dx, x2: b.x2 + m.dx, y: b.y + m.dy, y2: b.y2 + m.dy });
      for (const a of plugin.getAnnotations(chart)) {
        // Along a horizontal line is sideways, along a vertical one (or a box) up and down.
        const across = Math.abs(a.y2 - a.y) < 1 ? { x: 1, y: 4 } : { x: 4, y: 1 };
        for (const label of labelsOf(a)) {
          if (!label.options || label.options.display === false || !(label.width > 0)) continue;
          // A label past the side of the plot area (one at a line near its edge) moves inside.
          const over = Math.max(0, label.x2 - area.right) - Math.max(0, area.left - label.x);
          if (over !== 0) for (const k of ['x', 'x2', 'centerX']) label[k] -= over;
          const box = { x: label.x, x2: label.x2, y: label.y, y2: label.y2 };
          if (!hits(box)) {
            placed.push(box);
            continue;
          }
          const moves = placed.flatMap((p) => [
            { dx: p.x2 + gap - box.x, dy: 0 }, { dx: p.x - gap - box.x2, dy: 0 },
            { dx: 0, dy: p.y2 + gap - box.y }, { dx: 0, dy: p.y - gap - box.y2 }]);
          const cost = (m) => Math.abs(m.dx) * across.x + Math.abs(m.dy) * across.y;
          moves.sort((a, b) => cost(a) - cost(b));
          const move = moves.find((m) => inside(moved(box, m)) && !hits(moved(box, m)));
          if (!move) {
            label.options.display = false;
            continue;
          }
          for (const k of ['x', 'x2', 'centerX']) label[k] += move.dx;
          for (const k of ['y', 'y2', 'centerY']) label[k] += move.dy;
          placed.push(moved(box, move));
        }
      }
    },
  };

  const charts = [];
  function draw() {
    while (charts.length) charts.pop().destroy();
    const t = theme();
    Chart.defaults.color = t.muted;
    Chart.defaults.borderColor = t.grid;
    Chart.defaults.font.family = 'system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif';
    Chart.defaults.plugins.title.color = t.fg;
    for (const spec of specs) {
      const canvas = document.querySelector('canvas[data-chart="' + spec.id + '"]');
      if (!canvas) continue;
      const config = structuredClone(spec.config);
      for (const id of Object.keys(config.options.scales)) configureScale(config.options.scales[id]);
      configureTooltip(spec, config);
      cellColours(config, t);
      labelGrounds(config, t);
      config.plugins = (config.plugins || []).concat([labelsApart]);
      // The legend in the datasets' order, whatever order they are drawn in.
      const legend = config.options.plugins.legend;
      legend.labels = Object.assign({ sort: (a, b) => a.datasetIndex - b.datasetIndex }, legend.labels);
      const many = config.data.datasets.length > 1;
      config.options.plugins.legend.display = config.options.plugins.legend.display && many;
      charts.push(new Chart(canvas, config));
    }
  }

  draw();
  window.matchMedia('(prefers-color-scheme: dark)').addEventListener('change', draw);
  // Printing: light colours, and charts sized for the page.
  window.addEventListener('beforeprint', () => {
    document.documentElement.setAttribute('data-print', '');
    draw();
  });
  window.addEventListener('afterprint', () => {
    document.documentElement.removeAttribute('data-print');
    draw();
  });
})();
