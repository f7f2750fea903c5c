"""A corpus of hostile chat templates: each entry is (name, template, the limit it must hit).

Shared by tests/engine/test_engine_chat_template_limits.py (in process and in a memory-capped child
process) and by the reliability report. Every class of exhaustion the sandbox must stop has at
least one entry; alternatives ("a|b") are limits that may legitimately win the race.
"""

from __future__ import annotations

# (name, template, the limit it must hit)
HOSTILE = [
    ("range-1e9", "{% for i in range(10**9) %}{% endfor %}", "range"),
    ("range-list", "{{ range(10**9)|list|length }}", "range"),
    ("str-times-int", "{{ 'x' * 10**10 }}", "size"),
    ("int-times-str", "{{ 10000000000 * 'x' }}", "size"),
    ("list-times-int", "{{ ([1] * 10**10)|length }}", "size"),
    ("nested-loops", "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "loop"),
    ("reused-range-3-deep", "{% set r = range(100000) %}{% for i in r %}{% for j in r %}{% for k in r %}"
                            "{% endfor %}{% endfor %}{% endfor %}", "loop"),
    ("loop-over-messages-forever", "{% for i in range(100000) %}{% for m in messages * 100 %}{% endfor %}"
                                   "{% endfor %}", "loop"),
    ("center-filter", "{{ 'x'|center(10000000000) }}", "size"),
    ("center-method", "{{ 'x'.center(10000000000) }}", "size"),
    ("ljust-method", "{{ 'x'.ljust(10**10) }}", "size"),
    ("zfill-method", "{{ '1'.zfill(10**10) }}", "size"),
    ("format-width", "{{ '{:>10000000000}'.format('x') }}", "size"),
    ("format-nested-width", "{{ '{:{}}'.format('x', 10000000000) }}", "size"),
    ("format-map-width", "{{ '{a:>99999999999}'.format_map({'a': 1}) }}", "size"),
    ("printf-width", "{{ '%10000000000s' % 'x' }}", "size"),
    ("printf-star", "{{ '%*s' % (10000000000, 'x') }}", "size"),
    ("format-filter-width", "{{ '%10000000000d'|format(1) }}", "size"),
    ("power", "{{ 10**(10**10) }}", "size"),
    ("square-loop", "{% set ns = namespace(x=3) %}{% for i in range(64) %}{% set ns.x = ns.x * ns.x %}{% endfor %}",
     "size"),
    ("concat-doubling", "{% set ns = namespace(s='x') %}{% for i in range(100) %}{% set ns.s = ns.s ~ ns.s %}"
                        "{% endfor %}", "size"),
    ("plus-doubling", "{% set ns = namespace(s='x') %}{% for i in range(100) %}{% set ns.s = ns.s + ns.s %}"
                      "{% endfor %}", "size"),
    ("replace-blowup", "{% set s = 'x' * 100000 %}{{ s.replace('x', s) }}", "size"),
    ("replace-filter", "{% set s = 'x' * 100000 %}{{ s|replace('x', s) }}", "size"),
    ("join-blowup", "{{ (['x' * 1000000] * 100000)|join }}", "size"),
    ("join-separator", "{{ range(100000)|join('y' * 1000000) }}", "size"),
    ("join-method", "{{ ('y' * 1000000).join(range(100000)|map('string')) }}", "size"),
    ("indent-blowup", "{% set s = '\n' * 1000000 %}{{ s|indent(100000) }}", "size"),
    ("expandtabs", "{{ ('\t' * 100000).expandtabs(100000) }}", "size"),
    ("translate", "{{ ('x' * 100000).translate({120: 'y' * 100000}) }}", "size"),
    ("tojson-indent", "{{ [[[[1]]]]|tojson(indent=1000000) }}", "size"),
    ("sum-of-texts", "{{ (['x' * 1000] * 10000)|sum(start='') }}", "size"),
    ("aliased-list", "{% set a = ['x' * 1000000] %}{% set b = [a, a, a, a, a, a, a, a, a, a] %}"
                     "{% set c = [b, b, b, b, b, b, b, b, b, b] %}{{ c }}", "size"),
    ("aliased-dict", "{% set a = {'k': 'x' * 1000000} %}{% set b = {'1': a, '2': a, '3': a, '4': a} %}"
                     "{% set c = {'1': b, '2': b, '3': b} %}{{ c|tojson }}", "size"),
    ("deep-nesting", "{% set ns = namespace(a=[]) %}{% for i in range(10000) %}{% set ns.a = [ns.a] %}"
                     "{% endfor %}{{ ns.a }}", "depth"),
    ("self-recursion", "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(1) }}", "depth"),
    ("binary-recursion", "{% macro f(n) %}{% if n < 60 %}{{ f(n + 1) }}{{ f(n + 1) }}{% endif %}{% endmacro %}"
                         "{{ f(0) }}", "loop|time|output"),
    ("literal-flood", "{% for i in range(100000) %}{% for j in range(9) %}" + "y" * 1000
                      + "{% endfor %}{% endfor %}", "output"),
    ("macro-buffer-flood", "{% macro m() %}{% for i in range(100000) %}{{ 'z' * 100000 }}{% endfor %}"
                           "{% endmacro %}{{ m()|length }}", "output"),
    ("set-block-flood", "{% set s %}{% for i in range(100000) %}{{ 'z' * 100000 }}{% endfor %}{% endset %}"
                        "{{ s|length }}", "output"),
    ("lipsum", "{{ lipsum(100000, max=100000) }}", "size"),
    ("strftime-flood", "{{ strftime_now('%Y' * 10000000) }}", "size"),
    ("slow-filter", "{% set s = 'ab ' * 200000 %}{% for i in range(1000) %}{{ (s|wordwrap(1))|length }}"
                    "{% endfor %}", "time"),
    ("huge-template", "x" * (2 * 1024 * 1024), "template"),
]


