// The /demo page: speak typed text or a canned LLM reply streamed word by word over WS /v1/stream/text,
// play the PCM with Web Audio as it arrives (each buffer scheduled right after the previous one: gapless),
// show first-audio latency, a live waveform and level, the segment being spoken, and Stop = cancel with
// played_ms, showing the server's text_spoken. Session mode (PROTOCOL.md §2) when the server has it, else
// simple mode (§1). window.demo holds the page's state for the end-to-end test (tests/clients/test_demo_page.py).
"use strict";

const $ = (id) => document.getElementById(id);
const LLM_REPLY = "Sure, I can help with that. Your order shipped this morning and should arrive on Thursday. " +
  "The courier will text you a delivery window the evening before. If it is late, just reply to this message, " +
  "and I will send a replacement right away. Is there anything else I can do for you today?";
const LLM_WORDS_PER_S = 12; // a chat model's pace, with jitter below
const LEAD_S = 0.06; // how far ahead of "now" playback (re)starts: room for the next buffer to arrive

const demo = window.demo = {
  state: "idle", mode: null, rate: null, buffersScheduled: 0, audioSeconds: 0, firstAudioMs: null, underruns: 0,
  doneReason: null, textSpoken: null, textSpokenFrom: null, playedMs: 0, segments: [], errors: [], voices: null,
};

let audioCtx = null;
let analyser = null;
function audio() {
  if (!audioCtx) {
    audioCtx = new AudioContext();
    analyser = audioCtx.createAnalyser();
    analyser.fftSize = 2048;
    analyser.connect(audioCtx.destination);
    requestAnimationFrame(draw);
  }
  if (audioCtx.state === "suspended") audioCtx.resume();
  return audioCtx;
}

// Gapless scheduling: every buffer starts where the previous one ends; if the queue ran dry (the network or
// the server fell behind), playback restarts LEAD_S from now and that counts as an underrun.
class Player {
  constructor(rate) {
    this.rate = rate; this.ctx = audio(); this.next = 0; this.sources = new Set();
    this.pieces = []; this.samples = 0; this.stopped = false;
  }
  push(pcm) {
    if (this.stopped || !pcm.length) return;
    const buf = this.ctx.createBuffer(1, pcm.length, this.rate);
    const ch = buf.getChannelData(0);
    for (let i = 0; i < pcm.length; i++) ch[i] = pcm[i] / 32768;
    const now = this.ctx.currentTime;
    if (this.next < now + 0.005) {
      if (this.pieces.length) demo.underruns++;
      this.next = now + LEAD_S;
    }
    const src = this.ctx.createBufferSource();
    src.buffer = buf;
    src.connect(analyser);
    src.onended = () => this.sources.delete(src);
    src.start(this.next);
    this.sources.add(src);
    this.pieces.push([this.next, this.next + buf.duration, this.samples, this.samples + pcm.length]);
    this.next += buf.duration;
    this.samples += pcm.length;
    demo.buffersScheduled++;
    demo.audioSeconds = this.samples / this.rate;
  }
  playedSamples() {
    const t = this.ctx.currentTime;
    let played = 0;
    for (const [t0, t1, s0, s1] of this.pieces) {
      if (t >= t1) played = s1;
      else { if (t > t0) played = s0 + (t - t0) * this.rate; break; }
    }
    return Math.floor(played);
  }
  finished() { return this.pieces.length > 0 && this.ctx.currentTime >= this.next; }
  stop() {
    this.stopped = true;
    for (const s of this.sources) { try { s.stop(); } catch (e) { /* not started yet */ } }
    this.sources.clear();
  }
}

const wsUrl = () => (location.protocol === "https:" ? "wss://" : "ws://") + location.host + "/v1/stream/text";

// Session mode: session.start, one context per utterance, binary audio with the 16-byte header.
class SessionTransport {
  constructor(voice, on) { this.voice = voice; this.on = on; this.cid = "demo-" + Date.now(); this.rate = 24000; }
  open() {
    return new Promise((resolve) => {
      let started = false;
      const ws = this.ws = new WebSocket(wsUrl());
      ws.binaryType = "arraybuffer";
      // negotiated audio at the AudioContext's own rate: the server resamples once, with its state carried
      // across frames, so the browser never resamples buffer by buffer (no clicks at the joins)
      const rate = audio().sampleRate;
      const want = rate >= 8000 && rate <= 48000 ? { encoding: "pcm_s16le", sample_rate: rate } : undefined;
      ws.onopen = () => ws.send(JSON.stringify({ type: "session.start", voice: this.voice, framing: "binary",
        audio: want }));
      ws.onmessage = (m) => {
        if (started) return this.message(m);
        const o = JSON.parse(m.data);
        if (o.type === "session.started") {
          started = true; this.rate = (o.audio && o.audio.sample_rate) || 24000; resolve(true);
        } else {
          // a server without session mode refuses the "type" field of the first frame: use simple mode
          const noSession = o.field === "type" || /session mode/.test(o.message || "");
          if (!noSession) this.on.error(o);
          resolve(noSession ? false : null);
        }
      };
      ws.onclose = () => { if (!started) resolve(false); else this.on.closed(); };
    });
  }
  message(m) {
    if (m.data instanceof ArrayBuffer) {
      const view = new DataView(m.data);
      if (view.getUint8(0) !== 1) return;
      return this.on.audio(new Int16Array(m.data, 16, (m.data.byteLength - 16) >> 1));
    }
    const o = JSON.parse(m.data);
    if (o.context_id !== undefined && o.context_id !== this.cid && o.context_id !== "*") return;
    if (o.type === "segment.start") this.on.segment(o);
    else if (o.type === "context.done") { this.on.done(o.reason, o.text_spoken); this.ws.close(); }
    else if (o.type === "error") this.on.error(o);
  }
  send(o) { if (this.ws.readyState === WebSocket.OPEN) this.ws.send(JSON.stringify({ context_id: this.cid, ...o })); }
  text(t) { this.send({ type: "text", text: t }); }
  end() { this.send({ type: "end" }); }
  cancel(playedMs) { this.send({ type: "cancel", played_ms: Math.round(playedMs) }); }
}

// Simple mode: request fields first, raw int16 PCM frames, events as JSON, one terminal frame.
class SimpleTransport {
  constructor(voice, on) { this.voice = voice; this.on = on; this.rate = 24000; }
  open() {
    return new Promise((resolve) => {
      const ws = this.ws = new WebSocket(wsUrl());
      ws.binaryType = "arraybuffer";
      ws.onopen = () => { ws.send(JSON.stringify({ voice: this.voice, events: true })); resolve(true); };
      ws.onmessage = (m) => {
        if (m.data instanceof ArrayBuffer) return this.on.audio(new Int16Array(m.data));
        const o = JSON.parse(m.data);
        if (o.type === "segment.start") this.on.segment(o);
        else if (o.done) { if (o.sample_rate) this.rate = o.sample_rate; this.on.done(o.reason, o.text_spoken); }
        else if (o.type === "error" || o.error) this.on.error(o.error || o);
      };
      ws.onclose = () => this.on.closed();
      ws.onerror = () => resolve(false);
    });
  }
  send(o) { if (this.ws.readyState === WebSocket.OPEN) this.ws.send(JSON.stringify(o)); }
  text(t) { this.send({ text: t }); }
  end() { this.send({ end: true }); }
  cancel(playedMs) { this.send({ cancel: true, played_ms: Math.round(playedMs) }); }
}

let current = null; // {transport, player, t0, feeder, finished}

function setState(s) { demo.state = s; $("state").textContent = s; render(); }

async function start(words) {
  if (current) stopNow();
  Object.assign(demo, { buffersScheduled: 0, audioSeconds: 0, firstAudioMs: null, underruns: 0, doneReason: null,
    textSpoken: null, textSpokenFrom: null, playedMs: 0, segments: [], errors: [] });
  $("spoken").textContent = "–";
  $("first-audio").textContent = "–";
  setState("connecting");
  audio();
  const voice = $("voice").value;
  const run = current = { player: null, t0: null, feeder: null, ended: false, sent: "" };
  const on = {
    audio: (pcm) => {
      if (run !== current) return;
      if (demo.firstAudioMs === null && run.t0 !== null) {
        demo.firstAudioMs = performance.now() - run.t0;
        $("first-audio").textContent = demo.firstAudioMs.toFixed(0);
      }
      run.player.push(pcm);
      if (demo.state === "connecting" || demo.state === "waiting") setState("playing");
    },
    segment: (o) => { if (run === current) { demo.segments.push(o); render(); } },
    done: (reason, spoken) => {
      if (run !== current && !run.stopping) return;
      run.ended = true;
      demo.doneReason = reason;
      if (reason === "cancelled") showSpoken(run, spoken);
      else if (demo.state !== "stopped") setState("finishing");
    },
    error: (o) => { demo.errors.push(o); $("spoken").textContent = "error: " + (o.message || JSON.stringify(o)); },
    closed: () => { if (run === current && !run.ended && demo.state !== "stopped") setState("closed"); },
  };
  let tr = new SessionTransport(voice, on);
  let ok = await tr.open();
  if (ok === false) { tr = new SimpleTransport(voice, on); ok = await tr.open(); }
  if (!ok) { setState("error"); return; }
  demo.mode = tr instanceof SessionTransport ? "session" : "simple";
  demo.rate = tr.rate;
  $("mode").textContent = "mode: " + demo.mode;
  run.transport = tr;
  run.player = new Player(tr.rate);
  setState("waiting");
  $("stop").disabled = false;
  run.t0 = performance.now();
  const send = (t) => { run.sent += t; tr.text(t); };
  if (!Array.isArray(words)) { send(words); tr.end(); return; }
  let i = 0;
  const next = () => { // LLM pace: one word at a time, with jitter
    if (run !== current || run.stopping) return;
    if (i >= words.length) { tr.end(); return; }
    send(words[i] + (i < words.length - 1 ? " " : ""));
    i++;
    run.feeder = setTimeout(next, (1000 / LLM_WORDS_PER_S) * (0.5 + Math.random()));
  };
  next();
}

function showSpoken(run, spoken) {
  if (typeof spoken === "string") { demo.textSpoken = spoken; demo.textSpokenFrom = "server"; }
  else { // an older server sends no text_spoken: the segments whose audio had started playing
    // (text_end: a code-point offset into the text this page sent)
    const played = demo.playedMs * run.player.rate / 1000;
    const heard = demo.segments.filter((s) => s.audio_start_sample < played);
    const end = heard.length ? Math.max(...heard.map((s) => s.text_end)) : 0;
    demo.textSpoken = Array.from(run.sent).slice(0, end).join("");
    demo.textSpokenFrom = "client estimate (server sent no text_spoken)";
  }
  $("spoken").textContent = (demo.textSpoken || "(nothing)") + "   [" + demo.textSpokenFrom + "]";
  setState("stopped");
}

function stopNow() {
  const run = current;
  if (!run || !run.transport) return;
  clearTimeout(run.feeder);
  run.stopping = true;
  demo.playedMs = run.player.playedSamples() / run.player.rate * 1000;
  run.player.stop();
  if (run.ended) showSpoken(run, undefined); // the server had already finished: nothing left to cancel
  else { run.transport.cancel(demo.playedMs); setState("stopping"); }
  $("stop").disabled = true;
}

function render() {
  const el = $("segments");
  const run = current;
  const played = run && run.player ? run.player.playedSamples() : 0;
  let speaking = -1;
  for (const s of demo.segments) if (s.audio_start_sample <= played && played > 0) speaking = s.segment_index;
  if (el.childElementCount !== demo.segments.length) {
    el.replaceChildren(...demo.segments.map((s) => {
      const span = document.createElement("span"); span.textContent = s.text; return span;
    }));
  }
  demo.segments.forEach((s, i) => {
    el.children[i].className = s.segment_index === speaking && demo.state !== "stopped" ? "speaking"
      : s.segment_index < speaking ? "spoken" : "";
  });
  $("buffers").textContent = demo.buffersScheduled;
  $("seconds").textContent = demo.audioSeconds.toFixed(1);
}

function draw() {
  const canvas = $("wave"), g = canvas.getContext("2d");
  const data = new Float32Array(analyser.fftSize);
  analyser.getFloatTimeDomainData(data);
  let sum = 0;
  for (const x of data) sum += x * x;
  const rms = Math.sqrt(sum / data.length), db = 20 * Math.log10(rms + 1e-9);
  $("level").style.width = Math.max(0, Math.min(100, (db + 60) / 60 * 100)) + "%";
  g.fillStyle = "#10131a"; g.fillRect(0, 0, canvas.width, canvas.height);
  g.strokeStyle = "#5fd0a0"; g.lineWidth = 2; g.beginPath();
  for (let i = 0; i < data.length; i++) {
    const x = i / data.length * canvas.width, y = (0.5 - data[i] * 0.45) * canvas.height;
    i ? g.lineTo(x, y) : g.moveTo(x, y);
  }
  g.stroke();
  const run = current;
  if (run && run.player && demo.state === "finishing" && run.player.finished()) {
    setState("done"); $("stop").disabled = true;
  }
  if (run && run.player) { render(); if (demo.state !== "stopped") demo.playedMs = run.player.playedSamples() / run.player.rate * 1000; }
  requestAnimationFrame(draw);
}

async function loadVoices() {
  // the default model's presets (GET /v1/models) and the saved voices (GET /v1/voices); a server without the
  // voice library answers 404 there: the page then offers the presets only and says so
  const sel = $("voice");
  const group = (label, items) => {
    if (!items.length) return;
    const g = document.createElement("optgroup");
    g.label = label;
    for (const [value, text] of items) {
      const o = document.createElement("option"); o.value = value; o.textContent = text; g.append(o);
    }
    sel.append(g);
  };
  try {
    const models = (await (await fetch("/v1/models")).json()).data || [];
    const def = models.find((m) => m.default) || models[0];
    const presets = ((def && def.capabilities && def.capabilities.presets) || []).filter((p) => p !== "auto");
    group("presets", presets.map((p) => [p, p]));
  } catch (e) { /* "auto" only */ }
  try {
    const r = await fetch("/v1/voices");
    if (!r.ok) throw new Error("GET /v1/voices: " + r.status);
    const body = await r.json();
    const list = Array.isArray(body) ? body : body.data || [];
    demo.voices = list.length;
    group("saved voices", list.map((v) => {
      const id = typeof v === "string" ? v : v.voice_id || v.id;
      return [id, typeof v === "string" ? v : `${v.name || id}${v.source ? " (" + v.source + ")" : ""}`];
    }).filter(([id]) => id));
    if (!list.length) $("voice-note").textContent = "(no saved voices yet: POST /v1/voices adds one)";
  } catch (e) {
    demo.voices = null;
    $("voice-note").textContent = "(saved voices unavailable: " + e.message + ")";
  }
}

$("speak").onclick = () => start($("text").value);
$("llm").onclick = () => { $("text").value = LLM_REPLY; start(LLM_REPLY.split(" ")); };
$("stop").onclick = stopNow;
loadVoices();
