"""What the Python tests share: failures counted rather than raised, so that one run reports them
all (`check`); and for the server's client tests (serve_openai.py, serve_agents.py) a `loom serve`
on a free loopback port, stopped with SIGTERM (which must drain and exit 0)."""
import json
import os
import re
import signal
import subprocess
import time
import urllib.request

failures = 0

# Qwen2.5's template with tools renders ~500 tokens on stories260K's byte-level vocabulary, its
# whole context: this one writes calls the same way (hermes) in a prompt that leaves room.
HERMES_TEMPLATE = """{%- if tools %}<|im_start|>system
Functions: {% for t in tools %}{{ t.function.name }} {% endfor %}
Call one as <tool_call>
{"name": NAME, "arguments": ARGS}
</tool_call><|im_end|>
{% endif %}{% for m in messages %}<|im_start|>{{ m.role }}
{{ m.content }}<|im_end|>
{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant
{% endif %}"""


def check(cond, what):
    global failures
    if not cond:
        failures += 1
        print(f"FAILED: {what}", flush=True)


class LoomServer:
    """`LOOM serve --port 0 ARGS`, its log in a file until it stops; self.port once it listens."""

    def __init__(self, loom, name, *args):
        self.log = open(f"/tmp/loom-{name}-{os.getpid()}-{time.monotonic_ns()}.txt", "w+")
        self.proc = subprocess.Popen([*loom.split(), "serve", "--port", "0", *args], stderr=self.log)
        deadline, self.port = time.time() + 120, None
        while time.time() < deadline and self.port is None and self.proc.poll() is None:
            time.sleep(0.05)
            self.log.seek(0)
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", self.log.read())
            self.port = int(m.group(1)) if m else None
        if self.port is None:
            self.log.seek(0)
            raise RuntimeError(f"loom serve {' '.join(args)} did not start: {self.log.read()}")

    def post(self, path, body):
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
        return json.load(urllib.request.urlopen(req, timeout=60))

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(timeout=60)
        check(rc == 0, f"the server exited with {rc} after SIGTERM")
        os.unlink(self.log.name)
