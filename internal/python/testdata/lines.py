"""Prints, as JSON, the line table of every code object compiled from SOURCE
and the line CPython gives each code unit, for linetable_test.go."""
import ctypes
import dis
import json
import sys
import types

# The C function frames use for f_lineno and tracebacks: the ground truth that
# co_lines (3.10+) and dis.findlinestarts (3.9) are checked against.
addr2line = ctypes.pythonapi.PyCode_Addr2Line
addr2line.argtypes = [ctypes.py_object, ctypes.c_int]
addr2line.restype = ctypes.c_int

SOURCE = '''
import os

def loops(n):
    total = 0
    for i in range(n):
        while total < i:
            total += (i *
                      2)
        if total > 10:
            break
    else:
        total = -1
    return total

def handlers(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError as e:
        print(e)
        raise
    finally:
        print("done")

def comprehensions(xs):
    ys = [x * 2 for x in xs if x]
    zs = {x: y for x, y in zip(xs, ys)}
    g = (z for z in zs)
    return sorted(g, key=lambda v: -v)

def gap(a):
    b = a
@GAP@
    c = [@WIDE@]
    for i in c:
@GAP@
        b += i
    return b

def long(a):
@LONG@
    return a

class K:
    @staticmethod
    def m(
        a,
        b,
    ):
        return (a
            + b)

async def agen(xs):
    async for x in xs:
        yield x
        await x

def gen(xs):
    yield from xs
'''
# 300 blank lines make line deltas over 255; 200 loads on one 600-column
# line make more than 255 bytes of bytecode and columns over 255; 320
# statements make a function over 300 lines.
SOURCE = (SOURCE.replace('@GAP@', '\n' * 300)
          .replace('@WIDE@', ', '.join(['a'] * 200))
          .replace('@LONG@', '\n'.join('    x%d = a + %d' % (i, i) for i in range(320))))


def walk(co):
    yield co
    for c in co.co_consts:
        if isinstance(c, types.CodeType):
            yield from walk(c)


def expected(co):
    lines = [0] * (len(co.co_code) // 2)
    if sys.version_info >= (3, 10):
        for start, end, line in co.co_lines():
            for off in range(start, end, 2):
                lines[off // 2] = line or 0
    else:
        starts = list(dis.findlinestarts(co))
        for (off, line), (end, _) in zip(starts, starts[1:] + [(len(co.co_code), 0)]):
            for i in range(off // 2, end // 2):
                lines[i] = line
    for i, line in enumerate(lines):
        want = max(addr2line(co, 2 * i), 0)
        if line != want:
            sys.exit('%s: index %d: line %d, PyCode_Addr2Line %d' % (co.co_name, i, line, want))
    return lines


codes = []
for co in walk(compile(SOURCE, '<flint>', 'exec')):
    table = co.co_lnotab if sys.version_info < (3, 10) else co.co_linetable
    codes.append({'name': co.co_name, 'firstlineno': co.co_firstlineno,
                  'table': table.hex(), 'lines': expected(co)})
json.dump(codes, sys.stdout)
