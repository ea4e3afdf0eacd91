// Streaming PCM playback with Web Audio: each chunk is scheduled right after the previous one,
// so sound starts with the first chunk. The chunks are kept to make a WAV file for replay/download.
import { decodeBase64 } from "./socket.js";

export class PcmPlayer {
  constructor() {
    this.context = null;
    this.nextTime = 0;
    this.chunks = [];
    this.sampleRate = 24000;
    this.samples = 0;
    this.muted = false;
    this.startedAt = null;
  }

  // Call from a click handler: browsers only let a user gesture start audio.
  unlock() {
    if (!this.context) this.context = new AudioContext();
    if (this.context.state === "suspended") this.context.resume();
  }

  push(base64Pcm, sampleRate) {
    const bytes = decodeBase64(base64Pcm);
    const samples = new Float32Array(bytes.buffer, bytes.byteOffset, bytes.byteLength / 4);
    this.sampleRate = sampleRate;
    this.chunks.push(samples);
    this.samples += samples.length;
    this.play(samples, sampleRate);
    // what the page played, for the browser tests: startedAt is when the first chunk sounds (performance.now() clock)
    window.omniAudio = { chunks: this.chunks.length, samples: this.samples, sampleRate, state: this.context?.state, startedAt: this.startedAt };
  }

  play(samples, sampleRate) {
    if (!this.context || this.muted || samples.length === 0) return;
    const buffer = this.context.createBuffer(1, samples.length, sampleRate);
    buffer.copyToChannel(samples, 0);
    const source = this.context.createBufferSource();
    source.buffer = buffer;
    source.connect(this.context.destination);
    const start = Math.max(this.nextTime, this.context.currentTime + 0.05);
    source.start(start);
    this.startedAt ??= performance.now() + (start - this.context.currentTime) * 1000;
    this.nextTime = start + buffer.duration;
  }

  get seconds() { return this.samples / this.sampleRate; }

  wavBlob() { return wavBlob(this.chunks, this.sampleRate); }

  // The download in the chosen format: a WAV file, or raw 16-bit little-endian PCM.
  download(format) {
    if (format !== "pcm16") return { blob: this.wavBlob(), extension: "wav" };
    const wav = this.wavBlob();
    return { blob: wav.slice(44, wav.size, "audio/L16"), extension: "pcm" };
  }
}

export function wavBlob(chunks, sampleRate) {
  const total = chunks.reduce((n, c) => n + c.length, 0);
  const view = new DataView(new ArrayBuffer(44 + total * 2));
  const text = (offset, s) => { for (let i = 0; i < s.length; i++) view.setUint8(offset + i, s.charCodeAt(i)); };
  text(0, "RIFF"); view.setUint32(4, 36 + total * 2, true); text(8, "WAVE"); text(12, "fmt ");
  view.setUint32(16, 16, true); view.setUint16(20, 1, true); view.setUint16(22, 1, true);
  view.setUint32(24, sampleRate, true); view.setUint32(28, sampleRate * 2, true);
  view.setUint16(32, 2, true); view.setUint16(34, 16, true); text(36, "data"); view.setUint32(40, total * 2, true);
  let offset = 44;
  for (const chunk of chunks) {
    for (const sample of chunk) {
      view.setInt16(offset, Math.max(-1, Math.min(1, sample)) * 0x7fff, true);
      offset += 2;
    }
  }
  return new Blob([view], { type: "audio/wav" });
}
