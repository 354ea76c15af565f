#!/usr/bin/env python3
"""Reference outputs for dllm's Jinja interpreter and chat templates, rendered by Python.

Writes, under tests/fixtures/chat_templates/:
  jinja_cases.json   small templates covering each construct, rendered with the jinja2
                     environment transformers builds for chat templates (trim_blocks,
                     lstrip_blocks, loopcontrols, raise_exception, strftime_now, its tojson),
                     or the error Python raises (with the template line where jinja2 gives one)
  chat_cases.json    conversations rendered with apply_chat_template(tokenize=False) through
                     the real Qwen3 template, through synthetic templates in synthetic/*.jinja,
                     and through dllm's built-in templates (read from src/tokenizer/chat_template.cpp)
  qwen3/tokenizer_config.json   copy of the Qwen3 tokenizer config (holds its chat template)

The C++ tests compare dllm's output with these byte for byte; expected text always comes from
Python, never from dllm.

Usage (no network needed; the tokenizer is loaded from local files):
  python3 tools/make_chat_template_goldens.py [--qwen3-dir /work/shared/tokenizers/qwen3]
"""
import argparse
import copy
import json
import re
import shutil
from pathlib import Path

from transformers import AutoTokenizer
from transformers.utils.chat_template_utils import _compile_jinja_template

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "tests" / "fixtures" / "chat_templates"

# ---------------------------------------------------------------------------------------------
# Interpreter cases: (name, template, variables[, options]). options:
#   our_error: substring dllm's error message must contain (our wording; Python's may differ)
#   check_line: False when jinja2 reports a different (but also valid) line than we do
# ---------------------------------------------------------------------------------------------
USERS = [
    {"name": "ann", "role": "admin", "admin": True, "age": 31, "email": "ann@x.org"},
    {"name": "bob", "role": "user", "admin": False, "age": 25},
    {"name": "cid", "role": "user", "admin": False, "age": 40, "email": "cid@x.org"},
]
COMMON = {
    "xs": ["a", "b", "c", "d"],
    "ns_list": [3, 1, 2],
    "d": {"b": 1, "a": 2, "nested": {"k": [1, 2]}},
    "s": "Hello",
    "users": USERS,
    "name": "World",
    "n": None,
    "t": True,
    "f": 1.5,
    "i": 42,
    "empty": [],
    "content": "{{ x }} {% if %} {# c #}",
    "uni": "héllo wörld ✓ 你好 🙂",
}

JINJA_CASES = [
    # --- text, newlines, comments
    ("text_trailing_newline_dropped", "Hello\nworld\n", {}),
    ("text_two_trailing_newlines", "a\n\n", {}),
    ("text_crlf_normalized", "a\r\nb\rc", {}),
    ("comment_removed", "a{# comment #}b\n{# own line #}\nc", {}),
    ("comment_multiline", "a\n{# one\ntwo #}\nb", {}),
    ("raw_block", "{% raw %}{{ not parsed }} {% if %}{% endraw %}!", {}),
    ("html_not_escaped", "{{ '<b>&\"' }}", {}),
    ("unicode_passthrough", "{{ uni }}|{{ uni|length }}|{{ uni|upper }}", COMMON),
    ("jinja_text_in_values_not_evaluated", "[{{ content }}]", COMMON),
    # --- whitespace control, trim_blocks, lstrip_blocks
    ("ws_minus_both_sides", "a  {{- ' b ' -}}  c", {}),
    ("ws_block_minus", "x {%- if true %} y {% endif -%} z", {}),
    ("ws_trim_lstrip", "  {% if true %}\n  x\n  {% endif %}\n  {{ 'y' }}\n{# c #}\nz\n", {}),
    ("ws_plus_disables", "  {%+ if true %}x{% endif +%}\nafter", {}),
    ("ws_lstrip_only_at_line_start", "a {% if true %}b{% endif %} c\n   {% if true %}d{% endif %}", {}),
    ("ws_variable_not_lstripped", "  {{ 'v' }}\n  {% if true %}w{% endif %}", {}),
    ("ws_indented_template",
     "{%- for x in xs %}\n    {%- if loop.first %}\n        {{- 'first:' + x }}\n    {%- else %}\n"
     "        {{- ',' + x }}\n    {%- endif %}\n{%- endfor %}\n", COMMON),
    ("ws_newlines_kept_after_variables", "{% for x in xs %}\n{{ x }}\n{% endfor %}", COMMON),
    ("ws_comment_trim", "a\n  {#- note -#}  \nb", {}),
    # --- values and literals
    ("literal_values", "{{ s }}|{{ i }}|{{ f }}|{{ t }}|{{ n }}|{{ none }}|{{ True }}|{{ false }}", COMMON),
    ("float_formatting",
     "{{ 1e16 }} {{ 1e15 }} {{ 0.0001 }} {{ 1e-5 }} {{ 0.1 + 0.2 }} {{ 1/3 }} {{ 2.0 }} {{ -0.0 }}"
     " {{ 1e300 * 1e10 }} {{ 123456789.125 }} {{ 5e-324 }}", {}),
    ("integer_literals", "{{ 1_000 + 0x10 + 0b11 + 0o7 }} {{ 1.5e3 }} {{ 1e3 }}", {}),
    ("string_escapes", r'''{{ 'a\tb\u00e9\x41\101\q' }}|{{ "dq \"x\" 'y'" }}|{{ 'it\'s' }}''', {}),
    ("adjacent_strings", "{{ 'a' 'b' \"c\" }}", {}),
    ("list_dict_repr",
     "{{ [1, 'a', none, true, 1.5, {'k': \"it's\"}] }} {{ ('a',) }} {{ (1, 2) }} {{ () }} {{ {} }} {{ d }}",
     COMMON),
    ("string_repr_escapes", r"""{{ ['a\nb', "q'", 'tab\t', 'é', '\x01', 'both \' "', '\\'] }}""", {}),
    ("undefined_renders_empty", "[{{ missing }}][{{ d.missing }}][{{ xs[10] }}]", COMMON),
    ("list_trailing_comma", "{{ [1, 2,] }} {{ {'a': 1,} }}", {}),
    # --- operators
    ("arithmetic",
     "{{ 1 + 2 }} {{ 7 - 10 }} {{ 3 * 4 }} {{ 7 / 2 }} {{ 6 / 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }}"
     " {{ -7 % 3 }} {{ 2 ** 10 }} {{ 2 ** 3 ** 2 }} {{ -2 ** 2 }} {{ 7.5 // 2 }} {{ -7.5 % 2 }}"
     " {{ 2 ** -1 }} {{ true + 1 }} {{ 2 + 3 * 4 }} {{ (2 + 3) * 4 }} {{ 1.5 + 1 }} {{ -i }} {{ +f }}", COMMON),
    ("concat_and_repeat", "{{ 'a' ~ 1 ~ none ~ missing ~ 2.5 }} {{ 'ab' * 3 }} {{ 2 * 'x' }} {{ [1] + [2] }}"
     " {{ [0] * 3 }} {{ 'a' + 'b' }} {{ 'a' ~ 'b'|upper }}", {}),
    ("comparisons",
     "{{ 1 < 2 }} {{ 2 <= 1 }} {{ 'a' < 'b' }} {{ 1 == 1.0 }} {{ true == 1 }} {{ 1 != 2 }} {{ 1 < 2 < 3 }}"
     " {{ 3 > 2 > 2 }} {{ [1, 2] < [1, 3] }} {{ none == none }} {{ 'a' == 'a' }} {{ {'a': 1} == {'a': 1} }}"
     " {{ [1] == [1] }} {{ 'é' > 'z' }} {{ missing == missing }} {{ 1 == '1' }} {{ 2 >= 2.0 }}", {}),
    ("logic_returns_operands",
     "{{ true and 'x' }} {{ false or 'y' }} {{ not none }} {{ 0 or [] or 'z' }} [{{ '' and 'never' }}]"
     " {{ not 0 and not '' }} {{ missing or 'fallback' }} {{ 1 and 2 and 3 }}", {}),
    ("membership",
     "{{ 'a' in 'cat' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 3 not in [1] }} {{ 'x' in missing }}"
     " {{ 'a' in xs }} {{ 'nested' in d }} {{ 1 in d }} {{ '' in 'abc' }}", COMMON),
    ("precedence", "{{ not 1 == 2 }} {{ -3|abs }} {{ not xs|length }} {{ 2 * 3 ~ 4 }} {{ 'x' ~ 2 * 3 }} {{ 1 - 2 - 3 }}", COMMON),
    ("ternary",
     "{{ 'y' if true else 'n' }} {{ 'y' if false else 'n' }} [{{ 'y' if false }}]"
     " {{ 'a' if x is defined else 'b' if y is defined else 'c' }} {{ (1 if t else 2) + 10 }}", COMMON),
    # --- subscripts, slices, attributes
    ("subscripts",
     "{{ xs[0] }} {{ xs[-1] }} {{ xs.1 }} {{ d['a'] }} {{ d.a }} {{ d.nested.k[1] }} {{ d['nested']['k'][-1] }}"
     " {{ s[0] }} {{ s[-1] }} {{ uni[1] }} {{ users[1].name }}", COMMON),
    ("slices",
     "{{ xs[1:] }} {{ xs[:2] }} {{ xs[::-1] }} {{ xs[::2] }} {{ xs[-2:] }} {{ xs[5:] }} {{ s[1:4] }}"
     " {{ s[::-1] }} {{ uni[1:5] }} {{ uni[::-1] }} {{ xs[1:-1:2] }} {{ xs[10:0:-3] }} {{ xs[-100:100] }}"
     " {{ (1, 2, 3)[1:] }} {{ xs[:] }}", COMMON),
    ("attribute_vs_key",
     "{{ d2['items'] }} {{ d2.items is callable }} {{ d2.get('items') }} {{ d2.real }} [{{ d2.nope }}]"
     " {{ d2.keys()|list }}", {"d2": {"items": "value", "real": 1}}),
    ("defined_checks",
     "{{ x is defined }} {{ d.a is defined }} {{ d.zz is defined }} {{ d.zz is undefined }}"
     " {{ missing is defined and missing.x }} {{ n is none }} {{ n is not none }} {{ x is not defined }}",
     COMMON),
    # --- tests
    ("tests_types",
     "{% for v in [none, true, 0, 1.5, 'str', [1], {'a': 1}, missing] %}"
     "{{ v is none }}{{ v is boolean }}{{ v is integer }}{{ v is float }}{{ v is number }}{{ v is string }}"
     "{{ v is mapping }}{{ v is iterable }}{{ v is sequence }}{{ v is defined }}{{ v is true }}{{ v is false }}|"
     "{% endfor %}", {}),
    ("tests_values",
     "{{ 3 is odd }} {{ 3 is even }} {{ 6 is divisibleby 3 }} {{ 7 is divisibleby(3) }} {{ 'x' is equalto 'x' }}"
     " {{ 1 is eq 1 }} {{ 1 is ne 2 }} {{ 1 is lt 2 }} {{ 1 is gt 2 }} {{ 2 is le 2 }} {{ 2 is ge 3 }}"
     " {{ 'ab' is lower }} {{ 'AB' is upper }} {{ 'a' is in 'cat' }} {{ n is sameas none }}"
     " {{ range is callable }} {{ missing is callable }} {{ xs is sameas xs }} {{ 2 is greaterthan 1 }} {{ 1 is lessthan 0 }}", COMMON),
    # --- if / for / loop
    ("if_elif_else",
     "{% for v in [1, 2, 3, 4] %}{% if v == 1 %}one{% elif v == 2 %}two{% elif v == 3 %}three"
     "{% else %}many{% endif %} {% endfor %}", {}),
    ("loop_variables",
     "{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}"
     "{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.depth }}|{% endfor %}", COMMON),
    ("loop_prev_next",
     "{% for x in xs %}{{ loop.previtem|default('-') }}{{ x }}{{ loop.nextitem|default('-') }} {% endfor %}", COMMON),
    ("loop_cycle", "{% for x in xs %}{{ loop.cycle('odd', 'even') }} {% endfor %}", COMMON),
    ("for_else", "{% for x in empty %}{{ x }}{% else %}nothing{% endfor %}|{% for x in xs %}{{ x }}{% else %}no{% endfor %}", COMMON),
    ("for_filtered",
     "{% for x in range(10) if x is odd %}{{ x }}:{{ loop.index }}/{{ loop.length }}{% if not loop.last %},"
     "{% endif %}{% endfor %}", {}),
    ("for_unpack_items", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", COMMON),
    ("for_unpack_parenthesized", "{% for (a, b) in [[1, 2], [3, 4]] %}{{ a + b }} {% endfor %}", {}),
    ("for_over_dict_and_string", "{% for k in d %}{{ k }},{% endfor %}|{% for ch in 'héy' %}[{{ ch }}]{% endfor %}", COMMON),
    ("for_nested_outer_loop",
     "{% for a in [1, 2] %}{% set outer = loop %}{% for b in [3, 4] %}{{ outer.index }}{{ loop.index }}"
     "{{ a * b }} {% endfor %}{% endfor %}", {}),
    ("for_reversed_messages",
     "{% for m in msgs[::-1] %}{{ (msgs|length - 1) - loop.index0 }}:{{ m.role }} {% endfor %}",
     {"msgs": [{"role": "system"}, {"role": "user"}, {"role": "assistant"}]}),
    ("loop_controls",
     "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break %}{% endif %}"
     "{{ x }}{% endfor %}|{% for x in range(3) %}{% for y in range(3) %}{% if y > x %}{% break %}{% endif %}"
     "{{ x }}{{ y }} {% endfor %}{% endfor %}", {}),
    # --- set, namespace, scoping
    ("set_scoping_loop",
     "{% set count = 0 %}{% for i in range(3) %}{{ count }}{% set count = count + 1 %}{{ count }},{% endfor %}{{ count }}", {}),
    ("set_in_loop_not_carried",
     "{% for i in range(3) %}[{{ prev }}]{% set prev = i %}{% endfor %}", {}),
    ("set_in_if_leaks", "{% if true %}{% set a = 5 %}{% endif %}{{ a }}", {}),
    ("set_shadows_variable", "{% set xs = xs[1:] %}{{ xs }} {% for x in xs %}{{ x }}{% endfor %}", COMMON),
    ("set_tuple", "{% set a, b = 1, 2 %}{{ a }}{{ b }} {% set c, d2 = [3, 4] %}{{ c }}{{ d2 }}", {}),
    ("set_block", "{% set x %}  hello {{ name }}  {% endset %}[{{ x }}]", COMMON),
    ("set_block_filtered", "{% set x | upper | trim %}  hi {{ name }}  {% endset %}[{{ x }}]", COMMON),
    ("namespace",
     "{% set ns = namespace(count=0, found=false, items=[]) %}{% for i in range(4) %}{% set ns.count = ns.count + i %}"
     "{% if i == 2 %}{% set ns.found = true %}{% endif %}{% endfor %}{{ ns.count }} {{ ns.found }} {{ ns.items }}"
     " {{ ns.missing is defined }}", {}),
    ("namespace_repr", "{% set ns = namespace(a=1) %}{{ ns }}", {}),
    ("namespace_from_dict", "{% set ns = namespace({'a': 1}, b=2) %}{{ ns.a + ns.b }}", {}),
    ("scope_assigned_later_is_undefined_in_inner_frames",
     "{% for i in [1] %}[{{ a }}]{% endfor %}{% with x = 1 %}[{{ a }}]{% endwith %}{% set c %}[{{ a }}]{% endset %}{{ c }}"
     "{% macro m() %}[{{ a }}]{% endmacro %}{{ m() }}{% set a = 5 %}{{ m() }}|{% for i in [1] %}[{{ b }}]{% endfor %}", {"a": 10, "b": 20}),
    ("scope_read_first_resolves_outside",
     "{{ a }}{% set a = 5 %}{{ a }}|{% if true %}{{ b }}{% endif %}{% set b = 6 %}|{% if false %}{% set d = 1 %}{% endif %}"
     "{% for i in [1] %}[{{ d }}]{% endfor %}|{% for i in [1, 2] %}[{{ e }}]{% set e = i %}[{{ e }}]{% endfor %}", {"a": 10, "b": 20, "d": 30, "e": 40}),
    ("scope_loop_frame_locals",
     "{% for j in [1] %}{% for i in [1] %}[{{ a }}]{% endfor %}{% set a = 7 %}[{{ a }}]{% endfor %}[{{ a }}]", {"a": 10}),
    ("for_else_after_break_or_continue",
     "{% for x in [1, 2] %}{% break %}{% else %}E1{% endfor %}|{% for x in [1, 2] %}{{ x }}{% break %}{% else %}E2{% endfor %}|"
     "{% for x in [1, 2] %}{% if x == 2 %}{% break %}{% endif %}{{ x }}{% else %}E3{% endfor %}|"
     "{% for x in [1, 2] %}{% continue %}{% else %}E4{% endfor %}|"
     "{% for y in [1, 2, 3] %}{{ y }}{% for x in [] %}{% else %}{% if y == 2 %}{% break %}{% endif %}e{% endfor %}{% endfor %}", {}),
    ("break_inside_block_set",
     "{% for x in [1, 2, 3] %}{% set c %}{{ x }}{% if x == 2 %}{% break %}{% endif %}{% endset %}[{{ c }}]{% endfor %}"
     "{% for x in [1, 2] %}{% filter upper %}a{% continue %}{% endfilter %}b{% endfor %}", {}),
    ("odd_even_floats", "{{ 0.1 is odd }}{{ 3.0 is odd }}{{ 4.0 is even }}{{ -3 is odd }}{{ 2.5 is even }}", {}),
    ("with_block", "{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}[{{ a }}]", {}),
    # --- macros
    ("macro_defaults_kwargs",
     "{% macro greet(who, punct='!') %}Hi {{ who }}{{ punct }}{% endmacro %}{{ greet('A') }} {{ greet('B', punct='?') }}"
     " {{ greet(who='C') }} {{ greet('d')|upper }} [{{ greet() }}]", {}),
    ("macro_sees_template_variables",
     "{% macro show() %}{{ name }}-{{ later }}{% endmacro %}{% set later = 'L' %}{{ show() }}", COMMON),
    ("macro_recursion",
     "{% macro fact(k) %}{% if k <= 1 %}1{% else %}{{ k * fact(k - 1)|int }}{% endif %}{% endmacro %}{{ fact(5) }}", {}),
    ("macro_scope_isolated",
     "{% set v = 'outer' %}{% macro m() %}{% set v = 'inner' %}{{ v }}{% endmacro %}{{ m() }} {{ v }}", {}),
    # --- other tags
    ("filter_block", "{% filter upper %}hello {{ name }}{% endfilter %}", COMMON),
    ("generation_block", "{% generation %}gen {{ name }}{% endgeneration %}.", COMMON),
    ("print_tag", "{% print 'x' ~ 1 %}", {}),
    # --- filters
    ("filter_length", "{{ xs|length }} {{ 'héllo'|length }} {{ d|count }} {{ missing|length }} {{ ''|length }}", COMMON),
    ("filter_trim", "[{{ '  a b \n'|trim }}] [{{ 'xxaxx'|trim('x') }}] [{{ missing|trim }}] [{{ '\u3000 wide\u00a0'|trim }}]", {}),
    ("filter_tojson",
     "{{ d|tojson }} {{ 'é\"\\\\\n\t<>&\u2028'|tojson }} {{ [1, 2.5, none, true, false, 1e20]|tojson }}\n{{ d|tojson(indent=2) }}\n"
     "{{ d|tojson(indent=2, separators=(',', ': ')) }} {{ d|tojson(sort_keys=true) }} {{ 'é'|tojson(ensure_ascii=true) }}"
     " {{ {}|tojson(indent=2) }} {{ []|tojson(indent=4) }} {{ '🙂'|tojson(ensure_ascii=true) }} {{ d|tojson(separators=(',', ':')) }}"
     " {{ {'a': [1, {'b': []}]}|tojson(indent='\t') }} {{ users[0]|tojson }} {{ (1, 2)|tojson }} {{ {1: 'int key', none: 0}|tojson }}",
     COMMON),
    ("filter_string_int_float",
     "{{ 5|string }} {{ '42'|int + 1 }} {{ ' 7 '|int }} {{ '4.7'|int }} {{ 'x'|int }} {{ 'x'|int(3) }} {{ 4.9|int }}"
     " {{ -4.9|int }} {{ '2.5'|float }} {{ 'x'|float }} {{ true|int }} {{ none|int }} {{ '1_000'|int }} {{ 3|float }}"
     " {{ none|string }} {{ [1]|string }} {{ '0x1A'|int(base=16) }} {{ '-0x1A'|int(base=16) }} {{ '0b101'|int(base=0) }} {{ '1__0'|int }} {{ ' -12 '|int }} {{ '12abc'|int(7) }}", {}),
    ("filter_list_first_last",
     "{{ 'abc'|list }} {{ xs|first }} {{ xs|last }} {{ d|list }} {{ 'xyz'|first }} [{{ []|first }}] {{ 'xyz'|last }} {{ d|first }}",
     COMMON),
    ("filter_join", "{{ xs|join(', ') }} {{ [1, 2]|join }} {{ users|join(', ', attribute='name') }} {{ 'abc'|join('-') }}", COMMON),
    ("filter_default",
     "{{ missing|default('d') }} [{{ ''|default('e') }}] {{ ''|default('e', true) }} {{ none|default('n') }}"
     " {{ missing|d('short') }} {{ 0|default(5, boolean=true) }} [{{ missing|default }}]", {}),
    ("filter_case",
     "{{ 'hello WORLD'|upper }} {{ 'Hello'|lower }} {{ 'hELLO wORLD'|capitalize }} {{ \"hello big-world (x) o'neil\"|title }}"
     " {{ 'élan ünter'|title }} {{ 'ÉCOLE'|lower }}", {}),
    ("filter_replace", "{{ 'aaa'|replace('a', 'b') }} {{ 'aaa'|replace('a', 'b', 2) }} {{ 'abc'|replace('', '-') }} {{ 'héé'|replace('é', 'e') }}", {}),
    ("filter_items", "{% for k, v in d|items %}{{ k }}:{{ v }} {% endfor %}{{ {'a': 1}|items|list }} {{ missing|items|list }}", COMMON),
    ("filter_selectattr_rejectattr",
     "{{ users|selectattr('admin')|map(attribute='name')|list }} {{ users|rejectattr('admin')|map(attribute='name')|join(',') }}"
     " {{ users|selectattr('role', 'equalto', 'user')|list|length }} {{ users|selectattr('email', 'defined')|map(attribute='name')|list }}"
     " {{ users|selectattr('role', '==', 'admin')|list|length }} {{ users|rejectattr('email', 'undefined')|map(attribute='age')|list }}"
     " {{ users|selectattr('age', 'gt', 30)|map(attribute='name')|join }}", COMMON),
    ("filter_map",
     "{{ xs|map('upper')|list }} {{ users|map(attribute='email', default='none')|list }} {{ [1.5, 2.5]|map('round')|list }}"
     " {{ users|map(attribute='name')|map('capitalize')|join(' ') }} {{ [[1, 2], [3]]|map('length')|list }}"
     " {{ ['a b', 'c']|map('replace', ' ', '_')|list }}", COMMON),
    ("filter_reverse", "{{ xs|reverse|list }} {{ 'abc'|reverse }} {{ 'héllo'|reverse }} {% for x in xs|reverse %}{{ x }}{% endfor %}", COMMON),
    ("filter_safe_abs_round",
     "{{ '<b>'|safe }} {{ -3|abs }} {{ -2.5|abs }} {{ 2.5|round }} {{ 3.5|round }} {{ 2.675|round(2) }}"
     " {{ 2.1|round(0, 'ceil') }} {{ 2.9|round(method='floor') }} {{ 3|round }} {{ 1234.5|round(-2) }} {{ -0.5|round }}", {}),
    ("filter_unique_sum",
     "{{ ['a', 'A', 'b', 'a']|unique|list }} {{ ['a', 'A']|unique(case_sensitive=true)|list }} {{ [1, 2, 3]|sum }}"
     " {{ users|sum(attribute='age') }} {{ [[1], [2]]|sum(start=[]) }} {{ [0.5, 1]|sum }}"
     " {{ users|unique(attribute='role')|map(attribute='name')|list }}", COMMON),
    ("filter_sort_min_max_select",
     "{{ [3, 1, 2]|sort }} {{ ['b', 'A', 'c']|sort }} {{ ['b', 'A', 'c']|sort(case_sensitive=true) }}"
     " {{ users|sort(attribute='age', reverse=true)|map(attribute='name')|join }} {{ {'b': 1, 'a': 2}|dictsort }}"
     " {{ [3, 1, 2]|min }} {{ [3, 1, 2]|max }} {{ range(6)|select('odd')|list }} {{ range(6)|reject('even')|list }}"
     " {{ [0, 1, '', none, 'a']|select|list }} {{ range(10)|select('divisibleby', 3)|list }}"
     " {{ (users|max(attribute='age')).name }} {{ (users|min(attribute='age')).name }}", COMMON),
    ("filter_indent",
     "{{ 'a\nb\n\nc'|indent }}|{{ 'a\nb'|indent(2, true) }}|{{ 'a\n\nb'|indent('> ', blank=true) }}|{{ ''|indent(first=true) }}", {}),
    ("filter_chain_with_tests", "{{ xs|length is odd }} {{ (xs|first) is string }} {{ xs|map('upper')|join|lower }}", COMMON),
    ("printf_formatting",
     "{{ 'a%sb' % 1 }} {{ '%s-%s' % (1, 'x') }} {{ '%(a)s %(b)d' % {'a': 'x', 'b': 2} }} {{ 'abc' % [1] }}"
     " {{ '%d|%5.2f|%r|%-4s|%05d|%+d|%x|%%' % (3, 2.5, 'q', 'ab', 42, 7, 255) }} {{ '%.3f' % 1 }} {{ '%s' % none }}", {}),
    ("bare_comment_opener_at_end", "text {#", {}),
    # --- methods
    ("string_methods",
     "{{ s.startswith('He') }} {{ s.endswith(('x', 'lo')) }} {{ 'a b  c'.split() }} {{ 'a,b,,c'.split(',') }}"
     " {{ 'a,b,c'.split(',', 1) }} {{ 'a,b,c'.rsplit(',', 1) }} {{ '  x y  '.split(none, 1) }} {{ ' x y '.rsplit(none, 1) }}"
     " [{{ '  x y  '.strip() }}] {{ '--x--'.lstrip('-') }} {{ '--x--'.rstrip('-') }} {{ s.upper() }} {{ s.lower() }}"
     " {{ s.replace('l', 'L') }} {{ s.replace('l', 'L', 1) }} {{ s.find('l') }} {{ s.rfind('l') }} {{ s.find('z') }}"
     " {{ 'héllo'.find('l') }} {{ s.count('l') }} {{ '-'.join(['a', 'b']) }} {{ 'a\nb\r\nc\n'.splitlines() }}"
     " {{ 'hello wORLD 2nd'.title() }} {{ 'hELLO'.capitalize() }} {{ '{} and {name} {{x}}'.format(1, name='x') }}"
     " {{ 'abc'.removeprefix('a') }} {{ 'abc'.removesuffix('c') }} {{ '123'.isdigit() }} {{ 'Ab'.isupper() }}"
     " {{ 'ab'.isalpha() }} {{ ' \t'.isspace() }} {{ 'abc'.index('c') }} {{ '\n\nx\n'.strip('\n') }}", COMMON),
    ("think_split_like_qwen3",
     "{% set c = m.split('</think>')[-1].lstrip('\\n') %}{% set r = m.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}"
     "[{{ r }}][{{ c }}]", {"m": "<think>\nstep 1\nstep 2\n</think>\n\nanswer"}),
    ("dict_methods",
     "{{ d.get('a') }} {{ d.get('zz') }} {{ d.get('zz', 'dflt') }} {{ d.keys()|list }} {{ d.values()|list }}"
     " {{ d.items()|list }} {{ d.copy() == d }} {{ xs.count('a') }} {{ xs.index('c') }}", COMMON),
    # --- globals
    ("range_variants", "{{ range(3)|list }} {{ range(1, 4)|list }} {{ range(10, 0, -3)|list }} {{ range(0)|list }} {{ range(5, 1)|list }}", {}),
    ("dict_global", "{{ dict(a=1, b='x') }} {{ dict({'z': 0}, y=1) }} {{ dict([['k', 'v']]) }}", {}),
    ("strftime_now_literal", "{{ strftime_now('%%') }}", {}),
    # --- errors
    ("error_raise_exception", "{% if true %}\n{{ raise_exception('custom failure: ' ~ 42) }}\n{% endif %}", {},
     {"our_error": "custom failure: 42"}),
    ("error_raise_exception_in_loop",
     "{% for m in msgs %}\n{% if m.role not in ['user', 'assistant'] %}\n{{ raise_exception('Unknown role: ' + m.role) }}\n{% endif %}\n{% endfor %}",
     {"msgs": [{"role": "user"}, {"role": "tool"}]}, {"our_error": "Unknown role: tool"}),
    ("error_unsupported_include", "line1\n{% include 'x.j2' %}", {}, {"our_error": "unsupported tag 'include'"}),
    ("error_unsupported_extends", "{% extends 'base.j2' %}", {}, {"our_error": "unsupported tag 'extends'"}),
    ("error_unsupported_import", "a\nb\n{% import 'm.j2' as m %}", {}, {"our_error": "unsupported tag 'import'"}),
    ("error_syntax_missing_operand", "a\n{{ 1 + }}", {}),
    ("error_syntax_for_without_target", "a\n\n{% for %}", {}),
    ("error_unclosed_for", "{% for x in xs %}\nno end", {}, {"check_line": False, "our_error": "never closed"}),
    ("error_unclosed_string", "ok\n{{ 'abc }}", {}),
    ("error_unknown_filter", "a\n{{ x|nosuchfilter }}", {}, {"our_error": "unsupported filter 'nosuchfilter'"}),
    ("error_unknown_test", "{{ x is nosuchtest }}", {}, {"our_error": "unsupported test 'nosuchtest'"}),
    ("error_unknown_tag", "{% frobnicate %}", {}, {"our_error": "unknown tag 'frobnicate'"}),
    ("error_stray_endfor", "a\n{% endfor %}", {}, {"our_error": "endfor"}),
    ("error_undefined_attribute", "line1\nline2\n{{ missing.x }}", {}, {"our_error": "'missing' is undefined"}),
    ("error_dict_no_attribute", "{{ d.nope.deeper }}", COMMON, {"our_error": "'dict object' has no attribute 'nope'"}),
    ("error_list_no_element", "{{ xs[10].x }}", COMMON, {"our_error": "list object has no element 10"}),
    ("error_add_int_str", "{{ 1 + 'a' }}", {}),
    ("error_add_undefined", "{{ missing + 'a' }}", {}, {"our_error": "'missing' is undefined"}),
    ("error_call_non_callable", "{{ 'x'() }}", {}),
    ("error_call_undefined", "{{ nofunc(1) }}", {}, {"our_error": "'nofunc' is undefined"}),
    ("error_range_too_big", "{{ range(1000000)|length }}", {}),
    ("error_mutating_method", "{{ xs.append(1) }}", COMMON, {"our_error": "unsafe"}),
    ("error_namespace_underscore", "{% set ns = namespace() %}{% set ns._x = 1 %}", {}, {"our_error": "underscore"}),
    ("error_macro_too_many_args", "{% macro m() %}{% endmacro %}{{ m(1) }}", {}, {"our_error": "takes not more than 0 argument"}),
    ("error_unpack_mismatch", "{% for a, b in [[1, 2, 3]] %}{% endfor %}", {}, {"our_error": "too many values to unpack"}),
    ("error_tojson_undefined", "{{ missing|tojson }}", {}, {"our_error": "not JSON serializable"}),
    ("error_division_by_zero", "{{ 1 / 0 }}", {}),
    ("error_compare_int_str", "{{ 1 < 'a' }}", {}),
    ("error_break_outside_loop", "{% break %}", {}, {"check_line": False, "our_error": "outside of a for loop"}),
    ("error_printf_too_few_args", "{{ '%s %s' % (1,) }}", {}),
    ("error_printf_unused_args", "{{ 'abc' % 1 }}", {}),
    ("error_indent_non_string", "{{ 5|indent }}", {}),
    ("error_slice_none", "{{ n[1:] }}", COMMON),
    ("error_set_attribute_on_dict", "{% set d.x = 1 %}", COMMON, {"our_error": "not a namespace"}),
]


def template_line_of(exc):
    """The template line of a jinja2 error: its lineno, or the <template> frame in the traceback."""
    if getattr(exc, "lineno", None) and type(exc).__name__ != "SyntaxError":
        return exc.lineno
    line = None
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == "<template>":
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def make_jinja_cases():
    cases = []
    problems = []
    seen = set()
    for entry in JINJA_CASES:
        name, source, variables = entry[:3]
        options = entry[3] if len(entry) > 3 else {}
        assert name not in seen, name
        seen.add(name)
        case = {"name": name, "template": source, "variables": variables}
        try:
            case["expected"] = _compile_jinja_template(source).render(**copy.deepcopy(variables))
            if name.startswith("error_"):
                problems.append(f"{name}: expected an error, got {case['expected']!r}")
        except Exception as e:  # noqa: BLE001 - every jinja2 failure is a golden error
            if not name.startswith("error_"):
                problems.append(f"{name}: unexpected {type(e).__name__}: {e}")
            case["error"] = f"{type(e).__name__}: {e}"
            line = template_line_of(e)
            if line is not None and options.get("check_line", True):
                case["error_line"] = line
            if "our_error" in options:
                case["our_error"] = options["our_error"]
        cases.append(case)
    if problems:
        raise SystemExit("interpreter cases that do not render as intended:\n  " + "\n  ".join(problems))
    return cases


# ---------------------------------------------------------------------------------------------
# Chat template cases
# ---------------------------------------------------------------------------------------------
TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Get the current weather in a city.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "City name, e.g. Zürich"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "search", "description": "Search the web.",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}, "top_k": {"type": "integer", "default": 3}},
                       "required": ["query"]}}},
]

SYSTEM = {"role": "system", "content": "You are a careful assistant."}
U1 = {"role": "user", "content": "What is 2 + 2?"}
A1 = {"role": "assistant", "content": "4"}
U2 = {"role": "user", "content": "And 3 + 3?"}
A1_THINK = {"role": "assistant", "content": "<think>\nAdd two and two.\n</think>\n\nIt is 4."}
A2_THINK = {"role": "assistant", "content": "<think>\nThree plus three.\n</think>\n\n6"}
A_REASONING_FIELD = {"role": "assistant", "content": "It is 4.", "reasoning_content": "Simple addition."}
UNICODE = {"role": "user", "content": "Grüße aus Zürich! 你好，世界 🙂🚀 — «ça va?» עברית\u200b\ttab\r\nCRLF"}
JINJA_LOOKING = {"role": "user", "content": "Render {{ x }} and {% if y %}z{% endif %} and {# c #} literally: {{- '-' -}}"}
TOOL_TURNS = [
    {"role": "user", "content": "Weather in Zürich and Paris?"},
    {"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Zürich", "unit": "celsius"}}},
        {"type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
    {"role": "tool", "content": "{\"temp\": 21}"},
    {"role": "tool", "content": "{\"temp\": 24}"},
    {"role": "assistant", "content": "Zürich 21°C, Paris 24°C."},
    {"role": "user", "content": "Thanks!"},
]

QWEN3_CONVERSATIONS = [
    ("single_user", [U1], True, {}),
    ("single_user_thinking_false", [U1], True, {"enable_thinking": False}),
    ("single_user_thinking_true", [U1], True, {"enable_thinking": True}),
    ("single_user_no_generation_prompt", [U1], False, {}),
    ("system_user", [SYSTEM, U1], True, {}),
    ("system_user_thinking_false", [SYSTEM, U1], True, {"enable_thinking": False}),
    ("multi_turn", [SYSTEM, U1, A1, U2], True, {}),
    ("multi_turn_think_history", [U1, A1_THINK, U2], True, {}),
    ("multi_turn_think_history_thinking_false", [U1, A1_THINK, U2], True, {"enable_thinking": False}),
    ("final_assistant_keeps_think", [U1, A1_THINK, U2, A2_THINK], False, {}),
    ("reasoning_content_field", [U1, A_REASONING_FIELD, U2, {"role": "assistant", "content": "6", "reasoning_content": "3+3"}], False, {}),
    ("thinking_field_alias", [U1, {"role": "assistant", "content": "It is 4.", "thinking": "via thinking"}], False, {}),
    ("assistant_last_no_prompt", [U1, A1], False, {}),
    ("unicode_content", [SYSTEM, UNICODE], True, {}),
    ("jinja_looking_content", [JINJA_LOOKING, {"role": "assistant", "content": "{{ y }}"}, JINJA_LOOKING], True, {}),
    ("empty_contents", [{"role": "system", "content": ""}, {"role": "user", "content": ""}], True, {}),
    ("extra_message_keys", [{"role": "user", "content": "hi", "name": "bob", "meta": {"a": 1}}], True, {}),
    ("null_field_dropped", [{"role": "user", "content": "hi", "name": None}], True, {}),
    ("tools_with_calls", [SYSTEM] + TOOL_TURNS, True, {"tools": TOOLS}),
    ("tools_without_system", TOOL_TURNS[:4], True, {"tools": TOOLS}),
    ("tools_thinking_false", TOOL_TURNS, True, {"tools": TOOLS, "enable_thinking": False}),
    ("tool_response_in_user_turn",
     [U1, {"role": "assistant", "content": "<think>\nx\n</think>\n\ncall"},
      {"role": "user", "content": "<tool_response>\n42\n</tool_response>"}, {"role": "assistant", "content": "<think>\ny\n</think>\n\ndone"}],
     False, {}),
    ("tool_calls_without_content_key_flat",
     [U1, {"role": "assistant", "content": "calling", "tool_calls": [{"name": "search", "arguments": {"query": "q", "top_k": 2}}]},
      {"role": "tool", "content": "result"}], True, {"tools": TOOLS}),
    ("long_conversation", [SYSTEM] + [m for k in range(6) for m in (
        {"role": "user", "content": f"question {k}"}, {"role": "assistant", "content": f"<think>\nt{k}\n</think>\n\nanswer {k}"})] +
     [{"role": "user", "content": "last"}], True, {}),
    ("error_assistant_content_none", [U1, {"role": "assistant", "content": None, "tool_calls": [
        {"type": "function", "function": {"name": "search", "arguments": {"query": "q"}}}]}], True, {"tools": TOOLS}),
]

# Synthetic templates: written for these tests, modelled on public chat formats (Llama 3,
# Qwen2.5, and one that exercises macros and other constructs), not copied from any model.
SYNTHETIC_TEMPLATES = {
    "llama3_style": r"""{{- bos_token }}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content'] | trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = '' %}
{%- endif %}
{%- if system_message or tools is not none %}
    {{- '<|start_header_id|>system<|end_header_id|>\n\n' }}
    {%- if tools is not none %}
        {{- 'You can call these functions:\n' }}
        {%- for tool in tools %}
            {{- tool | tojson(indent=4) }}
            {{- '\n\n' }}
        {%- endfor %}
    {%- endif %}
    {{- system_message }}
    {{- '<|eot_id|>' }}
{%- endif %}
{%- for message in messages %}
    {%- if message.role in ['user', 'assistant'] and message.tool_calls is not defined %}
        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' }}
    {%- elif message.tool_calls is defined %}
        {%- set call = message.tool_calls[0].function %}
        {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
        {{- '{"name": "' + call.name + '", "parameters": ' }}
        {{- call.arguments | tojson }}
        {{- '}<|eot_id|>' }}
    {%- elif message.role == 'tool' %}
        {{- '<|start_header_id|>ipython<|end_header_id|>\n\n' }}
        {%- if message.content is mapping or message.content is iterable and message.content is not string %}
            {{- message.content | tojson }}
        {%- else %}
            {{- message.content }}
        {%- endif %}
        {{- '<|eot_id|>' }}
    {%- else %}
        {{- raise_exception('unexpected role ' + message.role) }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}
""",
    "qwen25_style": r"""{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are a helpful assistant.' }}
    {%- endif %}
    {{- "\n\n# Tools\n\nFunction signatures inside <tools></tools>:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools><|im_end|>\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
    {%- else %}
        {{- '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\n<tool_call>\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- message.content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
""",
    "kitchen_sink": r"""{#- Exercises constructs real templates use beyond the two above. -#}
{%- macro render_turn(role, text, index) -%}
[{{ index }}:{{ role | upper }}{{ '*' if role == 'system' }}] {{ text | trim | replace('\n', ' / ') }}
{% endmacro -%}
{%- set ns = namespace(users=0, last_user='', roles=[]) -%}
{%- for m in messages if m.role == 'user' -%}
    {%- set ns.users = ns.users + 1 -%}
    {%- set ns.last_user = m.content -%}
{%- endfor -%}
{%- set system_messages = messages | selectattr('role', 'equalto', 'system') | list -%}
{%- set roles = messages | map(attribute='role') | unique | list -%}
# {{ messages | length }} messages, {{ ns.users }} from the user, roles: {{ roles | join(', ') }}
{% if system_messages %}# system: {{ system_messages[0].content[:20] }}{{ '...' if system_messages[0].content | length > 20 }}
{% endif -%}
{%- for m in messages -%}
    {%- if m.role not in ['system', 'user', 'assistant', 'tool'] -%}
        {{- raise_exception('Unknown role: ' ~ m.role) -}}
    {%- endif -%}
    {{- render_turn(m.role, m.content, loop.index) -}}
    {%- if loop.last and m.role == 'user' and m.content is string and m.content.endswith('?') %}(question)
{% endif -%}
{%- endfor -%}
{%- if tools is not none and tools | length > 0 %}
tools: {{ tools | map(attribute='function') | map(attribute='name') | join(', ') }}
{{ tools[0] | tojson(indent=2, sort_keys=true) }}
{% endif -%}
{%- if documents is not none %}docs: {{ documents | length }}
{% endif -%}
{{ 'last user: ' ~ (ns.last_user | default('-', true)) ~ ' (' ~ (ns.last_user | length) ~ ' chars)' }}
{% if add_generation_prompt -%}
>>> {{ eos_token }}{{ '' if enable_thinking is not defined else (' thinking=' ~ enable_thinking | string | lower) }}
{%- endif %}
""",
}

SYNTHETIC_CONVERSATIONS = [
    ("single_user", [U1], True, {}),
    ("system_user", [SYSTEM, U1], True, {}),
    ("multi_turn", [SYSTEM, U1, A1, U2], True, {}),
    ("multi_turn_no_prompt", [U1, A1, U2, A1], False, {}),
    ("unicode_and_jinja_text", [UNICODE, A1, JINJA_LOOKING], True, {"enable_thinking": True}),
    ("tools", [SYSTEM] + TOOL_TURNS, True, {"tools": TOOLS}),
]

BUILTIN_CONVERSATIONS = [
    ("single_user", [U1], True, {}),
    ("single_user_no_prompt", [U1], False, {}),
    ("system_user", [SYSTEM, U1], True, {}),
    ("multi_turn", [SYSTEM, U1, A1, U2], True, {}),
    ("padded_content", [{"role": "user", "content": "  spaced out \n"}], True, {}),
    ("unicode_and_jinja_text", [UNICODE, A1, JINJA_LOOKING], True, {"enable_thinking": True}),
    ("thinking_false", [U1], True, {"enable_thinking": False}),
]


def strip_none(messages):
    return [{k: v for k, v in m.items() if v is not None} for m in messages]


def builtin_templates():
    """The built-in templates, read from the C++ source so Python renders exactly those."""
    source = (REPO / "src" / "tokenizer" / "chat_template.cpp").read_text(encoding="utf-8")
    names = {"kLladaTemplate": "llada", "kLlada2MoeTemplate": "llada2_moe", "kWedlmTemplate": "wedlm"}
    found = {}
    for constant, body in re.findall(r'constexpr std::string_view (k\w+Template) = R"jinja\((.*?)\)jinja";', source, re.S):
        if constant in names:
            found[names[constant]] = body
    assert set(found) == set(names.values()), f"built-in templates not found in chat_template.cpp: {found.keys()}"
    return found


def render_case(tokenizer, template_id, conversation, chat_template=None):
    name, messages, add_generation_prompt, extra = conversation
    case = {"template": template_id, "name": name, "messages": messages,
            "add_generation_prompt": add_generation_prompt, "extra_vars": extra}
    kwargs = dict(copy.deepcopy(extra))
    tools = kwargs.pop("tools", None)
    try:
        case["expected"] = tokenizer.apply_chat_template(
            copy.deepcopy(messages), tools=tools, tokenize=False, add_generation_prompt=add_generation_prompt,
            chat_template=chat_template, **kwargs)
        assert not name.startswith("error_"), f"{template_id}/{name}: expected an error"
    except Exception as e:  # noqa: BLE001
        assert name.startswith("error_"), f"{template_id}/{name}: unexpected {type(e).__name__}: {e}"
        case["error"] = f"{type(e).__name__}: {e}"
    return case


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--qwen3-dir", default="/work/shared/tokenizers/qwen3",
                        help="local Qwen3 tokenizer directory (tokenizer.json + tokenizer_config.json)")
    args = parser.parse_args()

    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "qwen3").mkdir(exist_ok=True)
    shutil.copyfile(Path(args.qwen3_dir) / "tokenizer_config.json", OUT / "qwen3" / "tokenizer_config.json")
    (OUT / "synthetic").mkdir(exist_ok=True)
    for name, source in SYNTHETIC_TEMPLATES.items():
        (OUT / "synthetic" / f"{name}.jinja").write_text(source, encoding="utf-8")

    jinja_cases = make_jinja_cases()
    with open(OUT / "jinja_cases.json", "w", encoding="utf-8") as f:
        json.dump({"generator": "tools/make_chat_template_goldens.py", "cases": jinja_cases}, f, ensure_ascii=False, indent=1)

    tokenizer = AutoTokenizer.from_pretrained(args.qwen3_dir, local_files_only=True)
    templates = {"qwen3": {"tokenizer_config": "qwen3/tokenizer_config.json"}}
    cases = [render_case(tokenizer, "qwen3", c) for c in QWEN3_CONVERSATIONS]
    for name, source in SYNTHETIC_TEMPLATES.items():
        templates[name] = {"source_file": f"synthetic/{name}.jinja", "special_tokens": tokenizer.special_tokens_map}
        cases += [render_case(tokenizer, name, c, chat_template=source) for c in SYNTHETIC_CONVERSATIONS]
    kitchen_bad_role = ("error_unknown_role", [U1, {"role": "narrator", "content": "x"}], True, {})
    cases.append(render_case(tokenizer, "kitchen_sink", kitchen_bad_role, chat_template=SYNTHETIC_TEMPLATES["kitchen_sink"]))
    documents_case = ("documents_and_thinking", [SYSTEM, U1], True, {"documents": [{"title": "t", "text": "x"}], "enable_thinking": False})
    cases.append(render_case(tokenizer, "kitchen_sink", documents_case, chat_template=SYNTHETIC_TEMPLATES["kitchen_sink"]))
    for family, source in builtin_templates().items():
        templates[f"builtin_{family}"] = {"builtin": family}
        cases += [render_case(tokenizer, f"builtin_{family}", c, chat_template=source) for c in BUILTIN_CONVERSATIONS]

    with open(OUT / "chat_cases.json", "w", encoding="utf-8") as f:
        json.dump({"generator": "tools/make_chat_template_goldens.py", "templates": templates, "cases": cases},
                  f, ensure_ascii=False, indent=1)
    errors = sum("error" in c for c in jinja_cases)
    print(f"{len(jinja_cases)} interpreter cases ({errors} errors), {len(cases)} chat cases -> {OUT}")


if __name__ == "__main__":
    main()
