// The playgrounds' WebSocket: one per page, several runs in flight, events routed by `ref`.
export class PlaygroundSocket {
  constructor(path = "/ws/console/playground/") {
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    this.url = `${scheme}://${location.host}${path}`;
    this.handlers = new Map();
    this.counter = 0;
    this.ready = this.connect();
  }

  connect() {
    return new Promise((resolve, reject) => {
      const ws = new WebSocket(this.url);
      ws.onopen = () => resolve(ws);
      ws.onerror = () => reject(new Error("could not connect to the playground socket"));
      ws.onclose = () => {
        for (const handler of this.handlers.values()) handler({ type: "error", message: "connection closed", field: null });
        this.handlers.clear();
        this.ready = new Promise((res, rej) => setTimeout(() => this.connect().then(res, rej), 1000));
      };
      ws.onmessage = (message) => {
        const event = JSON.parse(message.data);
        const handler = this.handlers.get(event.ref);
        if (!handler) return;
        handler(event);
        if (["done", "error", "cancelled"].includes(event.type)) this.handlers.delete(event.ref);
      };
    });
  }

  async run(mode, deployment, input, handler) {
    const ws = await this.ready;
    const ref = `${mode}-${Date.now()}-${++this.counter}`;
    this.handlers.set(ref, handler);
    ws.send(JSON.stringify({ type: "run", ref, mode, deployment, input }));
    return ref;
  }

  async cancel(ref) {
    const ws = await this.ready;
    ws.send(JSON.stringify({ type: "cancel", ref }));
  }
}

export function decodeBase64(text) {
  const binary = atob(text);
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
  return bytes;
}
