// AudioWorklet: the microphone resampled to a fixed rate (24 kHz for the realtime API) as
// 16-bit PCM, posted in chunks of `chunkMs`, with the chunk's RMS level for a meter.
// Downsampling first low-passes the signal (a windowed-sinc FIR), so no alias folds into speech.
const TAPS = 31;

class Pcm16Resampler extends AudioWorkletProcessor {
  constructor(options) {
    super();
    const { targetRate = 24000, chunkMs = 100 } = options.processorOptions || {};
    this.step = sampleRate / targetRate; // input samples per output sample
    this.filter = this.step > 1 ? lowPass(0.5 / this.step * 0.9, TAPS) : null;
    this.history = new Float32Array(TAPS); // the last inputs, for the filter
    this.previous = 0; // the last filtered input, for interpolation across blocks
    this.position = 0; // of the next output sample, in input samples from the block start
    this.chunkSamples = Math.round(targetRate * chunkMs / 1000);
    this.chunk = new Int16Array(this.chunkSamples);
    this.filled = 0;
    this.energy = 0;
  }

  process(inputs) {
    const channel = inputs[0] && inputs[0][0];
    if (!channel) return true;
    const filtered = this.filter ? this.lowPassed(channel) : channel;
    let position = this.position;
    while (position < filtered.length) {
      // between input index-1 and index: a constant delay of one input sample
      const index = Math.floor(position);
      const fraction = position - index;
      const before = index === 0 ? this.previous : filtered[index - 1];
      const sample = before + (filtered[index] - before) * fraction;
      this.emit(sample);
      position += this.step;
    }
    this.position = position - filtered.length;
    this.previous = filtered[filtered.length - 1];
    return true;
  }

  // A causal FIR over the last TAPS inputs (its delay is the same for every sample, so harmless).
  lowPassed(block) {
    const out = new Float32Array(block.length);
    const history = this.history;
    for (let i = 0; i < block.length; i++) {
      history.copyWithin(0, 1);
      history[TAPS - 1] = block[i];
      let sum = 0;
      for (let k = 0; k < TAPS; k++) sum += history[k] * this.filter[k];
      out[i] = sum;
    }
    return out;
  }

  emit(sample) {
    const clipped = Math.max(-1, Math.min(1, sample));
    this.energy += clipped * clipped;
    this.chunk[this.filled++] = clipped < 0 ? clipped * 0x8000 : clipped * 0x7fff;
    if (this.filled < this.chunkSamples) return;
    const level = Math.sqrt(this.energy / this.filled);
    const pcm = this.chunk;
    this.port.postMessage({ pcm, level }, [pcm.buffer]); // transferred: pcm is empty from here on
    this.chunk = new Int16Array(this.chunkSamples);
    this.filled = 0;
    this.energy = 0;
  }
}

// A Hann-windowed sinc low-pass with `cutoff` in cycles per sample, normalised to unit gain.
function lowPass(cutoff, taps) {
  const middle = (taps - 1) / 2;
  const weights = new Float32Array(taps);
  let total = 0;
  for (let k = 0; k < taps; k++) {
    const x = k - middle;
    const sinc = x === 0 ? 2 * cutoff : Math.sin(2 * Math.PI * cutoff * x) / (Math.PI * x);
    const window = 0.5 - 0.5 * Math.cos((2 * Math.PI * k) / (taps - 1));
    weights[k] = sinc * window;
    total += weights[k];
  }
  for (let k = 0; k < taps; k++) weights[k] /= total;
  return weights;
}

registerProcessor("pcm16-resampler", Pcm16Resampler);
