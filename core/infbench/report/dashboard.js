// infbench report: draws the figures from the embedded cells and redraws them on every
// filter or selector change. Loaded inline by infbench.report.html (no server, works offline).
// Metric headings come from D.metrics (infbench.data.metrics, the one table of definitions).
(function(){
const D = JSON.parse(document.getElementById('infbench-data').textContent);
const rows = D.rows.filter(r => r.status === 'ok');
// An adaptive sweep's unmeasured cells: drawn hollow, with their 90 % interval, in the throughput figure.
const predictedRows = D.rows.filter(r => r.status === 'predicted');
const dims = D.dimensions, mets = D.metrics;
const $ = id => document.getElementById(id);
const uniq = k => [...new Set(rows.map(r => r[k]).filter(v => v !== null && v !== undefined))]
  .sort((a, b) => (typeof a === 'number' && typeof b === 'number') ? a - b : String(a).localeCompare(String(b)));
// filters
const fbox = $('filters');
for (const [k, label] of Object.entries(dims)) {
  const vals = uniq(k);
  const l = document.createElement('label'); l.textContent = label;
  const s = document.createElement('select'); s.multiple = true; s.id = 'filter-' + k; s.dataset.dim = k;
  s.size = Math.min(4, Math.max(2, vals.length));
  for (const v of vals) { const o = document.createElement('option'); o.value = String(v); o.textContent = String(v); o.selected = true; s.appendChild(o); }
  s.addEventListener('change', render); l.appendChild(s); fbox.appendChild(l);
}
for (const id of ['x-axis', 'y-axis', 'color-by', 'latency-metric', 'frontier-axis', 'slo-ttft', 'slo-tpot']) $(id).addEventListener('change', render);
function filtered() {
  const sel = {};
  for (const k of Object.keys(dims)) {
    const s = $('filter-' + k); sel[k] = new Set([...s.selectedOptions].map(o => o.value));
  }
  return rows.filter(r => Object.keys(dims).every(k => r[k] === null || r[k] === undefined || sel[k].has(String(r[k]))));
}
function filteredPredicted() {
  const sel = {};
  for (const k of Object.keys(dims)) { const s = $('filter-' + k); sel[k] = new Set([...s.selectedOptions].map(o => o.value)); }
  return predictedRows.filter(r => Object.keys(dims).every(k => r[k] === null || r[k] === undefined || sel[k].has(String(r[k])) || !uniq(k).includes(r[k])));
}
// Every string drawn comes from data (model names, devices, labels, imported files): plotly renders
// a subset of HTML in names, labels, titles and hover text, so each is HTML-escaped before it is
// drawn (issue 41: a model name <a href=...> became a live link). BR is the only markup of ours
// inside data strings; the templates (hovertemplate, texttemplate) are ours and kept.
const BR = '\u0001br\u0001', TEMPLATE_KEYS = new Set(['hovertemplate', 'texttemplate']);
const escText = s => s.replace(/[&<>]/g, c => ({'&': '&amp;', '<': '&lt;', '>': '&gt;'}[c])).split(BR).join('<br>');
function safe(v, k) {
  if (typeof v === 'string') return TEMPLATE_KEYS.has(k) ? v : escText(v);
  if (Array.isArray(v)) return v.map(x => safe(x, k));
  if (v && typeof v === 'object') { const o = {}; for (const [kk, x] of Object.entries(v)) o[kk] = safe(x, kk); return o; }
  return v;
}
const Plotly = {react: (id, traces, layout, cfg) => window.Plotly.react(id, safe(traces, ''), safe(layout, ''), cfg)};
const num = v => (v === null || v === undefined || Number.isNaN(v)) ? null : v;
// A logarithmic axis labelled with whole values (issue 41: plotly labels minor ticks with a bare
// digit, a "9" left of 1 and a "2" and "5" between decades): ticks at each decade, or at 1, 2 and 5
// of each decade where the values span fewer than three, each with its full value.
function logAxis(values, extra) {
  const v = values.filter(x => num(x) !== null && x > 0);
  if (!v.length) return {type: 'log', ...extra};
  let lo = v[0], hi = v[0]; for (const x of v) { if (x < lo) lo = x; if (x > hi) hi = x; }
  const a = Math.floor(Math.log10(lo)), b = Math.ceil(Math.log10(hi)), subs = b - a >= 3 ? [1] : [1, 2, 5];
  const t = [];
  for (let k = a; k <= b; k++) for (const m of subs) { const x = m * Math.pow(10, k); if (x >= lo / 2.5 && x <= hi * 2.5) t.push(x); }
  return {type: 'log', tickvals: t, ticktext: t.map(x => x.toLocaleString('en-US', {maximumSignificantDigits: 3})), ...extra};
}
function varying(rs, keys) { return keys.filter(k => new Set(rs.map(r => r[k])).size > 1); }
function key(r, keys) { return keys.map(k => k === 'engine_args' ? '[' + (r[k] || 'no engine args') + ']' : (k === 'tp' ? 'tp' : k === 'input_len' ? 'i' : k === 'output_len' ? 'o' : k === 'batch' ? 'b' : '') + r[k]).join(' '); }
const engineOf = r => r.engine + (r.engine_args ? ' [' + r.engine_args + ']' : '');
function empty(id, title, why) {
  Plotly.react(id, [], {title: {text: title}, xaxis: {visible: false}, yaxis: {visible: false},
    annotations: [{text: why, showarrow: false, font: {size: 14, color: '#888'}}]}, {responsive: true});
}
const base = t => ({title: {text: t, x: 0.01, xanchor: 'left', font: {size: 13}}, margin: {t: 40, r: 20, b: 60, l: 70}, legend: {font: {size: 10}}, hovermode: 'closest'});
function figThroughput(rs) {
  const x = $('x-axis').value, y = $('y-axis').value, id = 'fig-throughput';
  const pts = rs.filter(r => num(r[y]) !== null && num(r[x]) !== null);
  if (!pts.length && !predictedRows.length) return empty(id, mets[y], 'no cells with ' + mets[y]);
  const cb = $('color-by').value;
  const keys = cb === 'config' ? varying(pts, ['device', 'engine', 'engine_args', 'model', 'dtype', 'tp', 'batch', 'input_len', 'output_len'].filter(k => k !== x)) : [cb];
  const groups = new Map();
  for (const r of pts) { const g = key(r, keys) || 'all'; if (!groups.has(g)) groups.set(g, []); groups.get(g).push(r); }
  const traces = [...groups].map(([g, rs2]) => { rs2.sort((a, b) => a[x] - b[x]);
    return {type: 'scatter', mode: 'lines+markers', name: g, x: rs2.map(r => r[x]), y: rs2.map(r => r[y]), text: rs2.map(r => r.label), hovertemplate: '%{text}<br>%{y:.4g}<extra></extra>'}; });
  const pred = filteredPredicted().filter(r => num(r[y]) !== null && num(r[x]) !== null);
  if (pred.length) {
    const lo = r => num(r[y + '_lo']), hi = r => num(r[y + '_hi']);
    traces.push({type: 'scatter', mode: 'markers', name: 'predicted (not measured), 90 % interval', x: pred.map(r => r[x]), y: pred.map(r => r[y]),
      marker: {symbol: 'circle-open', size: 9}, text: pred.map(r => r.label), hovertemplate: '%{text}<br>%{y:.4g} (predicted)<extra></extra>',
      error_y: {type: 'data', symmetric: false, array: pred.map(r => hi(r) === null ? 0 : hi(r) - r[y]), arrayminus: pred.map(r => lo(r) === null ? 0 : r[y] - lo(r))}});
  }
  Plotly.react(id, traces, {...base(mets[y] + ' vs ' + dims[x]), xaxis: x === 'tp' ? {title: {text: dims[x]}, type: 'linear'} : logAxis(pts.map(r => r[x]).concat(pred.map(r => r[x])), {title: {text: dims[x]}}), yaxis: {title: {text: mets[y]}}}, {responsive: true});
}
function figHeatmap(rs) {
  const y = $('y-axis').value, id = 'fig-heatmap';
  const pts = rs.filter(r => num(r[y]) !== null);
  const ins = [...new Set(pts.map(r => r.input_len))].sort((a, b) => a - b), outs = [...new Set(pts.map(r => r.output_len))].sort((a, b) => a - b);
  if (!pts.length) return empty(id, 'Input x output', 'no cells with ' + mets[y]);
  const z = outs.map(o => ins.map(i => { const v = pts.filter(r => r.input_len === i && r.output_len === o).map(r => r[y]); return v.length ? Math.max(...v) : null; }));
  const fixed = ['device', 'engine', 'model', 'batch'].filter(k => new Set(pts.map(r => r[k])).size === 1).map(k => pts[0][k]);
  Plotly.react(id, [{type: 'heatmap', x: ins.map(String), y: outs.map(String), z: z, colorscale: 'Viridis', texttemplate: '%{z:.3s}', hovertemplate: 'in %{x} out %{y}: %{z:.4g}<extra></extra>', colorbar: {title: {text: 'best'}}}],
    {...base(mets[y] + ' (best over the rest)' + (fixed.length ? ' - ' + fixed.join(', ') : '')), xaxis: {title: {text: 'input length'}, type: 'category'}, yaxis: {title: {text: 'output length'}, type: 'category'}}, {responsive: true});
}
function bars(rs, p50, p99, name) {
  const pts = rs.filter(r => num(r[p50]) !== null);
  return {type: 'bar', name: name, x: pts.map(r => r.label), y: pts.map(r => r[p50]),
          error_y: {type: 'data', symmetric: false, array: pts.map(r => num(r[p99]) === null ? 0 : r[p99] - r[p50]), arrayminus: pts.map(() => 0)}};
}
function figLatency(rs) {
  const id = 'fig-latency', pts = rs.slice(0, 40);
  if (!pts.some(r => num(r.ttft_ms_p50) !== null)) return empty(id, 'TTFT and ITL', 'no latency data');
  Plotly.react(id, [bars(pts, 'ttft_ms_p50', 'ttft_ms_p99', mets.ttft_ms_p50), bars(pts, 'itl_ms_p50', 'itl_ms_p99', mets.itl_ms_p50)],
    {...base('TTFT and ITL p50, whiskers to p99' + (rs.length > 40 ? ' (first 40 cells; filter to see others)' : '')), barmode: 'group', yaxis: logAxis(pts.flatMap(r => [r.ttft_ms_p50, r.ttft_ms_p99, r.itl_ms_p50, r.itl_ms_p99]), {title: {text: 'ms'}}), xaxis: {tickfont: {size: 8}}}, {responsive: true});
}
function figPower(rs) {
  const id = 'fig-power';
  const pts = rs.filter(r => num(r.avg_power_w) !== null || num(r.tokens_per_j) !== null);
  if (!pts.length) return empty(id, 'Power and tokens per joule', 'no energy measured for these cells (see power_note in `infbench results --format json`)');
  const g = new Map();
  for (const r of pts) { const k = r.device + ' | ' + engineOf(r) + ' | ' + r.model; if (!g.has(k)) g.set(k, []); g.get(k).push(r); }
  const mean = (a, k) => { const v = a.map(r => r[k]).filter(x => num(x) !== null); return v.length ? v.reduce((s, x) => s + x, 0) / v.length : null; };
  const ks = [...g.keys()];
  Plotly.react(id, [
    {type: 'bar', name: mets.avg_power_w, x: ks, y: ks.map(k => mean(g.get(k), 'avg_power_w')), offsetgroup: 1},
    {type: 'bar', name: mets.tokens_per_j, x: ks, y: ks.map(k => mean(g.get(k), 'tokens_per_j')), yaxis: 'y2', offsetgroup: 2}],
    {...base('Average power and tokens per joule (mean over cells)'), barmode: 'group', yaxis: {title: {text: mets.avg_power_w}}, yaxis2: {title: {text: mets.tokens_per_j}, overlaying: 'y', side: 'right'}}, {responsive: true});
}
function figPareto(rs) {
  const id = 'fig-pareto', lm = $('latency-metric').value;
  const pts = rs.filter(r => num(r[lm]) !== null && num(r.output_tok_s_per_device) !== null);
  if (!pts.length) return empty(id, 'Latency vs throughput', 'no cells with both');
  const sloT = parseFloat($('slo-ttft').value), sloP = parseFloat($('slo-tpot').value);
  const meets = r => (Number.isNaN(sloT) || (num(r.ttft_ms_p99) !== null && r.ttft_ms_p99 <= sloT)) && (Number.isNaN(sloP) || (num(r.tpot_ms_p99) !== null && r.tpot_ms_p99 <= sloP));
  const traces = [];
  for (const dev of [...new Set(pts.map(r => r.device))]) {
    const d = pts.filter(r => r.device === dev);
    const order = d.map((r, i) => i).sort((a, b) => d[a][lm] - d[b][lm] || d[b].output_tok_s_per_device - d[a].output_tok_s_per_device);
    const front = []; let best = -Infinity;
    for (const i of order) if (d[i].output_tok_s_per_device > best) { front.push(d[i]); best = d[i].output_tok_s_per_device; }
    traces.push({type: 'scatter', mode: 'markers', name: dev, x: d.map(r => r[lm]), y: d.map(r => r.output_tok_s_per_device), text: d.map(r => r.label + (meets(r) ? BR + 'meets SLO' : '')),
      marker: {size: d.map(r => meets(r) ? 12 : 7), symbol: d.map(r => meets(r) ? 'star' : 'circle')}, hovertemplate: '%{text}<extra></extra>'});
    traces.push({type: 'scatter', mode: 'lines', name: dev + ' Pareto front', x: front.map(r => r[lm]), y: front.map(r => r.output_tok_s_per_device), line: {dash: 'dot'}});
  }
  const n = pts.filter(meets).length;
  Plotly.react(id, traces, {...base('Latency vs throughput per device: ' + n + ' of ' + pts.length + ' cells meet the SLO (stars)'), xaxis: logAxis(pts.map(r => r[lm]), {title: {text: mets[lm]}}), yaxis: {title: {text: mets.output_tok_s_per_device}}}, {responsive: true});
}
// The throughput-interactivity frontier (issue 31; the same arithmetic as infbench.analysis.frontier):
// x = tok/s/user (1 / TPOT p50), y = the selected axis; one front per device and engine, pooled over
// configurations; predicted cells hollow with their 90 % interval; the table reads each front
// at D.frontier_at tok/s/user (linear between front points, nothing outside) and gives its area.
function paretoFront(pts, y, higher) {
  const s = higher ? 1 : -1;
  const order = pts.slice().sort((a, b) => b.tok_s_per_user - a.tok_s_per_user || s * (b[y] - a[y]));
  const front = []; let best = null;
  for (const p of order) {
    if (best === null || s * p[y] > s * best[y]) { front.push(p); best = p; }
    else if (p[y] === best[y] && p.tok_s_per_user === best.tok_s_per_user) front.push(p);
  }
  return front.sort((a, b) => a.tok_s_per_user - b.tok_s_per_user);
}
function frontAt(front, y, x) {
  if (!front.length || x < front[0].tok_s_per_user || x > front[front.length - 1].tok_s_per_user) return null;
  for (let i = 0; i + 1 < front.length; i++) {
    const a = front[i], b = front[i + 1];
    if (a.tok_s_per_user <= x && x <= b.tok_s_per_user)
      return b.tok_s_per_user === a.tok_s_per_user ? Math.max(a[y], b[y]) : a[y] + (b[y] - a[y]) * (x - a.tok_s_per_user) / (b.tok_s_per_user - a.tok_s_per_user);
  }
  return front[front.length - 1][y];
}
function frontArea(front, y) {
  let s = 0; for (let i = 0; i + 1 < front.length; i++) s += (front[i + 1].tok_s_per_user - front[i].tok_s_per_user) * (front[i][y] + front[i + 1][y]) / 2;
  return front.length > 1 ? s : null;
}
function figFrontier(rs) {
  const id = 'fig-frontier', y = $('frontier-axis').value, higher = !(D.frontier_lower || []).includes(y);
  const all = rs.concat(filteredPredicted()).filter(r => num(r.tok_s_per_user) !== null && num(r[y]) !== null && r[y] > 0);
  const table = $('frontier-table');
  if (!all.length) { table.innerHTML = ''; window.infbench.fronts = []; return empty(id, 'Throughput-interactivity frontier', 'no serving cell with a TPOT and ' + mets[y] + ' (infbench run --preset frontier)'); }
  const groups = new Map();
  // An imported publication's cells (infbench import) form fronts of their own (front_series names the
  // source, model, precision and shape), drawn hollow with a dashed front.
  for (const r of all) { const k = r.front_series || (r.device + ' | ' + r.engine); if (!groups.has(k)) groups.set(k, []); groups.get(k).push(r); }
  const traces = [], fronts = [];
  for (const [k, pts] of groups) {
    const front = paretoFront(pts, y, higher);
    // How sure the shown front is (issue 43; Front.certainty in Python): its best point measured or
    // predicted, and the widest relative 90 % interval of its predicted points.
    const peak = front.reduce((b, r) => b === null || (higher ? r[y] > b[y] : r[y] < b[y]) ? r : b, null);
    const rel = front.filter(r => r.predicted && num(r[y + '_lo']) !== null && num(r[y + '_hi']) !== null)
      .map(r => (r[y + '_hi'] - r[y + '_lo']) / 2 / r[y]);
    fronts.push({name: k, points: pts.length, front: front.map(r => ({x: r.tok_s_per_user, y: r[y], cell_id: r.cell_id, label: r.label, predicted: !!r.predicted})),
      at: (D.frontier_at || []).map(x => frontAt(front, y, x)), area: frontArea(front, y),
      peak: peak && {y: peak[y], cell_id: peak.cell_id, predicted: !!peak.predicted},
      largest_interval: rel.length ? Math.max(...rel) : null});
    const meas = pts.filter(r => !r.predicted), pred = pts.filter(r => r.predicted);
    const imported = meas.length > 0 && meas.every(r => r.published);
    traces.push({type: 'scatter', mode: 'markers', name: imported ? k + ' (imported)' : k, legendgroup: k, x: meas.map(r => r.tok_s_per_user), y: meas.map(r => r[y]),
      text: meas.map(r => r.label), hovertemplate: '%{text}<br>%{x:.3g} tok/s/user, %{y:.4g}' + (imported ? ' (imported)' : '') + '<extra></extra>',
      marker: imported ? {symbol: 'diamond-open', size: 10} : {size: 8}});
    if (pred.length) {
      const lo = r => num(r[y + '_lo']), hi = r => num(r[y + '_hi']);
      traces.push({type: 'scatter', mode: 'markers', name: k + ' predicted (90 % interval)', legendgroup: k, x: pred.map(r => r.tok_s_per_user), y: pred.map(r => r[y]),
        text: pred.map(r => r.label), hovertemplate: '%{text}<br>%{x:.3g} tok/s/user, %{y:.4g} (predicted)<extra></extra>', marker: {symbol: 'circle-open', size: 10},
        error_y: {type: 'data', symmetric: false, array: pred.map(r => hi(r) === null ? 0 : hi(r) - r[y]), arrayminus: pred.map(r => lo(r) === null ? 0 : r[y] - lo(r))}});
    }
    traces.push({type: 'scatter', mode: 'lines', name: k + (imported ? ' front (imported)' : ' front'), legendgroup: k, x: front.map(r => r.tok_s_per_user), y: front.map(r => r[y]),
      text: front.map(r => r.label), hovertemplate: '%{text}<extra>front</extra>', line: imported ? {shape: 'linear', dash: 'dash'} : {shape: 'linear'}});
    fronts[fronts.length - 1].imported = imported;
  }
  const nImp = fronts.filter(f => f.imported).length;
  Plotly.react(id, traces, {...base('Throughput-interactivity frontier: ' + mets[y] + ' against tok/s/user (1 / TPOT p50), one front per device and engine'
      + (nImp ? '; ' + nImp + ' imported (hollow, dashed; converted to these definitions: docs/metrics.md)' : '')),
    xaxis: {title: {text: mets.tok_s_per_user}}, yaxis: {title: {text: mets[y]}}}, {responsive: true});
  const fmt = v => v === null ? '-' : (Math.abs(v) >= 100 ? v.toFixed(0) : v.toPrecision(3));
  const peakCell = f => !f.peak ? '-' : fmt(f.peak.y) + (f.peak.predicted ? ' <b class="peak-predicted">(predicted: measure that cell before quoting the peak)</b>' : '');
  const sure = f => f.largest_interval === null ? 'all measured' : '+/-' + (100 * f.largest_interval).toFixed(0) + ' %';
  table.innerHTML = '<tr><th>device | engine</th><th>front / cells</th>' + (D.frontier_at || []).map(x => '<th>at ' + x + ' tok/s/user</th>').join('')
    + '<th>area</th><th>best point</th><th>widest predicted interval</th></tr>'
    + fronts.map(f => '<tr><td>' + f.name.replace(/[<>&]/g, c => ({'<': '&lt;', '>': '&gt;', '&': '&amp;'}[c])) + '</td><td>' + f.front.length + ' / ' + f.points + '</td>'
      + f.at.map(v => '<td>' + fmt(v) + '</td>').join('') + '<td>' + fmt(f.area) + '</td><td>' + peakCell(f) + '</td><td>' + sure(f) + '</td></tr>').join('');
  window.infbench.fronts = fronts;
}
function figRoofline(rs) {
  const id = 'fig-roofline';
  const t = rs.filter(r => num(r.ttft_floor_ms) !== null && num(r.ttft_ms_mean) !== null), p = rs.filter(r => num(r.tpot_floor_ms) !== null && num(r.tpot_ms_mean) !== null);
  if (!t.length && !p.length) return empty(id, 'Measured vs roofline floor', 'no cell with a described device (see `infbench devices`)');
  const all = t.map(r => r.ttft_floor_ms).concat(t.map(r => r.ttft_ms_mean), p.map(r => r.tpot_floor_ms), p.map(r => r.tpot_ms_mean));
  const lo = Math.min(...all) / 1.5, hi = Math.max(...all) * 1.5;
  const pct = v => num(v) === null ? 'n/a' : (100 * v).toFixed(1) + ' %';
  Plotly.react(id, [
    {type: 'scatter', mode: 'markers', name: 'TTFT (prefill)', x: t.map(r => r.ttft_floor_ms), y: t.map(r => r.ttft_ms_mean), text: t.map(r => r.label + BR + 'MFU ' + pct(r.mfu)), hovertemplate: '%{text}<br>floor %{x:.3g} ms, measured %{y:.3g} ms<extra></extra>'},
    {type: 'scatter', mode: 'markers', name: 'TPOT (decode)', marker: {symbol: 'diamond'}, x: p.map(r => r.tpot_floor_ms), y: p.map(r => r.tpot_ms_mean), text: p.map(r => r.label + BR + 'MBU ' + pct(r.mbu)), hovertemplate: '%{text}<br>floor %{x:.3g} ms, measured %{y:.3g} ms<extra></extra>'},
    {type: 'scatter', mode: 'lines', name: 'hardware limit (measured = floor)', x: [lo, hi], y: [lo, hi], line: {color: '#999', dash: 'dash'}}],
    {...base('Measured mean vs roofline floor (ms)'), xaxis: logAxis(all, {title: {text: 'roofline floor (ms)'}}), yaxis: logAxis(all, {title: {text: 'measured (ms)'}})}, {responsive: true});
}
function figQuality(rs) {
  // LLM-Inference-Bench Figs. 10/29: one point per precision of a model on an engine and device,
  // at its best output throughput over the filtered cells.
  const id = 'fig-quality';
  const best = new Map();
  for (const r of rs) {
    if (num(r.perplexity) === null || num(r.output_tok_s) === null) continue;
    const k = [r.model, engineOf(r), r.device, r.dtype].join('|');
    if (!best.has(k) || r.output_tok_s > best.get(k).output_tok_s) best.set(k, r);
  }
  const pts = [...best.values()];
  if (!pts.length) return empty(id, 'Perplexity vs throughput', 'no perplexity stored for these cells (infbench perplexity, same model, engine and dtype)');
  const series = new Map();
  for (const r of pts) { const s = r.model.split('/').pop() + ' ' + engineOf(r) + ' | ' + r.device; if (!series.has(s)) series.set(s, []); series.get(s).push(r); }
  const pct = v => num(v) === null ? '' : ' (' + (v >= 0 ? '+' : '') + (100 * v).toFixed(2) + ' %' + ')';
  const traces = [...series].map(([s, ps]) => { ps.sort((a, b) => a.perplexity - b.perplexity);
    return {type: 'scatter', mode: 'lines+markers+text', name: s, x: ps.map(r => r.output_tok_s), y: ps.map(r => r.perplexity),
      text: ps.map(r => r.dtype), textposition: 'top center',
      error_y: {type: 'data', array: ps.map(r => num(r.perplexity_stderr) === null ? 0 : r.perplexity_stderr), visible: true},
      marker: {size: 10, symbol: ps.map(r => r.beyond_gate ? 'x' : 'circle'), color: ps.map(r => r.beyond_gate ? '#d62728' : undefined)},
      customdata: ps.map(r => r.label + BR + 'perplexity ' + r.perplexity.toFixed(4) + pct(r.ppl_increase) + (r.beyond_gate ? BR + 'beyond the gate' : '')),
      hovertemplate: '%{customdata}<br>%{x:.4g} output tok/s<extra></extra>'}; });
  const gate = num(D.ppl_gate) === null ? '' : ' - red x: more than ' + (100 * D.ppl_gate).toFixed(2).replace(/\.?0+$/, '') + ' % above the highest precision';
  Plotly.react(id, traces, {...base('Perplexity vs output throughput per precision' + gate), xaxis: {title: {text: mets.output_tok_s}}, yaxis: {title: {text: mets.perplexity}}}, {responsive: true});
}
function render() {
  const rs = filtered();
  $('status').textContent = rs.length + ' of ' + rows.length + ' ok cells shown' + (D.failed ? ' (' + D.failed + ' failed cells are in the store, not plotted)' : '');
  figThroughput(rs); figHeatmap(rs); figLatency(rs); figPower(rs); figPareto(rs); figFrontier(rs); figRoofline(rs); figQuality(rs);
  window.infbench.renders += 1;
}
window.infbench = {rows: rows, filtered: filtered, render: render, renders: 0, fronts: []};
render();
})();
