// Frame colours: warm hues by package or module, so one library's frames
// read as one colour; kernel frames cool and distinct; a diff white for
// unchanged, red for grew, blue for shrank (as flamegraph.pl draws one, and
// internal/profile.DeltaColour).

import { KIND_INLINE, KIND_KERNEL, KIND_PROCESS, KIND_ROOT, type Flat } from './tree';

/** packageOf names the group a frame is coloured by: the Go package, the
 * C++ namespace or Rust crate, else the module (binary or library). */
export function packageOf(name: string, module: string): string {
  if (!name.startsWith('<') && !name.startsWith('[')) {
    const ns = name.indexOf('::');
    if (ns > 0) return name.slice(0, ns);
    // Go: "github.com/a/b.(*T).M" -> "github.com/a/b", "runtime.mallocgc" -> "runtime".
    const slash = name.lastIndexOf('/', name.indexOf('(') >= 0 ? name.indexOf('(') : name.length);
    const dot = name.indexOf('.', slash + 1);
    if (dot > 0 && !name.includes(' ') && !/\.(cold|isra|part|constprop)\b/.test(name)) return name.slice(0, dot);
  }
  if (module !== '') return module.slice(module.lastIndexOf('/') + 1);
  return name;
}

function hash(s: string): number {
  // FNV-1a: stable across runs, so a package keeps its colour.
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return h >>> 0;
}

/** Palette maps colours to small integers, so frames can be drawn grouped
 * by colour: one fill per colour instead of one per frame. */
export class Palette {
  readonly colors: string[] = [];
  private index = new Map<string, number>();

  id(color: string): number {
    let i = this.index.get(color);
    if (i === undefined) {
      i = this.colors.length;
      this.colors.push(color);
      this.index.set(color, i);
    }
    return i;
  }
}

export const HIGHLIGHT = '#e040fb';


function userColor(key: string, inline: boolean): string {
  const h = hash(key);
  const hue = h % 55; // red to yellow
  const sat = 70 + ((h >>> 8) % 20);
  const light = 56 + ((h >>> 16) % 10) + (inline ? 8 : 0);
  return `hsl(${hue}, ${sat}%, ${light}%)`;
}

function kernelColor(key: string): string {
  const h = hash(key);
  return `hsl(${180 + (h % 25)}, ${45 + ((h >>> 8) % 20)}%, ${58 + ((h >>> 16) % 10)}%)`;
}

/** frameColors assigns each frame a colour id in palette by its package. */
export function frameColors(f: Flat, palette: Palette): Uint16Array {
  const out = new Uint16Array(f.n);
  const byKey = new Map<string, number>();
  // Names repeat across the tree: colour each (name, kind) once.
  const byName = new Map<number, number>();
  for (let i = 0; i < f.n; i++) {
    const kind = f.kind[i];
    if (kind === KIND_ROOT) {
      out[i] = palette.id('hsl(0, 0%, 80%)');
      continue;
    }
    if (kind === KIND_PROCESS) {
      out[i] = palette.id('hsl(250, 25%, 78%)');
      continue;
    }
    const nameKey = f.name[i] * 8 + kind;
    let c = byName.get(nameKey);
    if (c === undefined) {
      const pkg = packageOf(f.strings[f.name[i]], f.module[i] >= 0 ? f.strings[f.module[i]] : '');
      const key = kind + '\0' + pkg;
      c = byKey.get(key);
      if (c === undefined) {
        c = palette.id(kind === KIND_KERNEL ? kernelColor(pkg) : userColor(pkg, kind === KIND_INLINE));
        byKey.set(key, c);
      }
      byName.set(nameKey, c);
    }
    out[i] = c;
  }
  return out;
}

/** LEVELS is how many shades each side of a diff has. */
const LEVELS = 24;

/** deltaColor is the fill of a change of share delta when the largest is
 * max: white at 0, saturated red or blue at ±max. */
export function deltaColor(delta: number, max: number): string {
  if (!(max > 0) || delta === 0 || !isFinite(delta)) return 'rgb(255, 255, 255)';
  const t = Math.round(Math.min(Math.abs(delta) / max, 1) * LEVELS) / LEVELS;
  const v = Math.round(255 - 210 * t);
  return delta > 0 ? `rgb(255, ${v}, ${v})` : `rgb(${v}, ${v}, 255)`;
}
