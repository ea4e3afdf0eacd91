// Streamed playback of the realtime API's audio (base64 16-bit PCM) through Web Audio: each
// chunk is scheduled right after the previous one. It knows how much of each item was actually
// heard, so that a barge-in can stop the sound and tell the server (conversation.item.truncate).
import { decodeBase64 } from "./socket.js";

export class VoicePlayer {
  constructor(context, rate = 24000) {
    this.context = context;
    this.rate = rate;
    this.nextTime = 0;
    this.sources = new Set();
    this.items = new Map(); // item id -> {contentIndex, segments: [[start, seconds]], samples}
    this.chunks = 0;
    this.samples = 0;
  }

  push(base64Pcm, itemId, contentIndex = 0) {
    const bytes = decodeBase64(base64Pcm);
    const pcm = new Int16Array(bytes.buffer, bytes.byteOffset, Math.floor(bytes.byteLength / 2));
    if (pcm.length === 0) return;
    const samples = new Float32Array(pcm.length);
    for (let i = 0; i < pcm.length; i++) samples[i] = pcm[i] / 0x8000;
    const buffer = this.context.createBuffer(1, samples.length, this.rate);
    buffer.copyToChannel(samples, 0);
    const source = this.context.createBufferSource();
    source.buffer = buffer;
    source.connect(this.context.destination);
    const start = Math.max(this.nextTime, this.context.currentTime + 0.03);
    source.start(start);
    source.onended = () => this.sources.delete(source);
    this.sources.add(source);
    this.nextTime = start + buffer.duration;
    const item = this.items.get(itemId) || { contentIndex, segments: [], samples: 0 };
    item.segments.push([start, buffer.duration]);
    item.samples += samples.length;
    this.items.set(itemId, item);
    this.chunks += 1;
    this.samples += samples.length;
  }

  get playing() {
    return this.nextTime > this.context.currentTime;
  }

  // Milliseconds of the item's audio that have come out of the speakers so far.
  playedMs(itemId) {
    const item = this.items.get(itemId);
    if (!item) return 0;
    const now = this.context.currentTime;
    const seconds = item.segments.reduce((sum, [start, length]) => sum + Math.min(Math.max(now - start, 0), length), 0);
    return Math.floor(seconds * 1000);
  }

  totalPlayedMs() {
    let total = 0;
    for (const itemId of this.items.keys()) total += this.playedMs(itemId);
    return total;
  }

  receivedMs(itemId) {
    const item = this.items.get(itemId);
    return item ? Math.floor((item.samples * 1000) / this.rate) : 0;
  }

  contentIndex(itemId) {
    return this.items.get(itemId)?.contentIndex ?? 0;
  }

  // Silence now: whatever was scheduled and not yet heard is dropped.
  stop() {
    for (const source of this.sources) {
      try { source.stop(); } catch { /* already ended */ }
    }
    this.sources.clear();
    const now = this.context.currentTime;
    for (const item of this.items.values()) {
      item.segments = item.segments.map(([start, length]) => [start, Math.min(Math.max(now - start, 0), length)]);
    }
    this.nextTime = now;
  }
}
