// The microphone as 24 kHz 16-bit mono PCM chunks: getUserMedia into an AudioWorklet that
// resamples (pcm16_worklet.js). `onChunk(pcm: Int16Array, level: number)` gets every 100 ms.
const WORKLET_URL = new URL("./pcm16_worklet.js", import.meta.url);

export class Microphone {
  constructor(context, onChunk, { rate = 24000, chunkMs = 100 } = {}) {
    this.context = context;
    this.onChunk = onChunk;
    this.rate = rate;
    this.chunkMs = chunkMs;
    this.stream = null;
    this.source = null;
    this.node = null;
    this.stopped = false;
  }

  // Stop may come while start is still waiting (for the permission prompt, say): start then
  // releases what it got instead of leaving the microphone open.
  async start() {
    if (!navigator.mediaDevices?.getUserMedia || !this.context.audioWorklet) {
      throw new Error("This browser gives no microphone access to this page: it needs HTTPS (or localhost).");
    }
    try {
      this.stream = await navigator.mediaDevices.getUserMedia({
        audio: { channelCount: 1, echoCancellation: true, noiseSuppression: true, autoGainControl: true },
      });
    } catch (error) {
      throw new Error(microphoneProblem(error));
    }
    if (this.stopped) return this.stop();
    try {
      await this.context.audioWorklet.addModule(WORKLET_URL);
    } catch (error) {
      this.stop();
      throw error;
    }
    if (this.stopped) return this.stop();
    this.source = this.context.createMediaStreamSource(this.stream);
    this.node = new AudioWorkletNode(this.context, "pcm16-resampler", {
      numberOfInputs: 1,
      numberOfOutputs: 0,
      channelCount: 1,
      channelCountMode: "explicit",
      processorOptions: { targetRate: this.rate, chunkMs: this.chunkMs },
    });
    this.node.port.onmessage = (message) => this.onChunk(message.data.pcm, message.data.level);
    this.source.connect(this.node);
  }

  stop() {
    this.stopped = true;
    this.node?.port.close();
    this.source?.disconnect();
    this.node?.disconnect();
    this.stream?.getTracks().forEach((track) => track.stop());
    this.stream = this.source = this.node = null;
  }
}

function microphoneProblem(error) {
  if (error?.name === "NotAllowedError") return "Microphone access was denied: allow it in the browser and press Start again.";
  if (error?.name === "NotFoundError") return "No microphone was found.";
  if (error?.name === "NotReadableError") return "The microphone is in use by another program.";
  return `The microphone could not start: ${error?.message || error}`;
}
