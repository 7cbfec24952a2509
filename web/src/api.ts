// The agent's HTTP API (docs/API.md), as the UI calls it: relative URLs, so
// the UI works wherever the agent is mounted, and one-line errors.

/** ApiError is a failed request: the agent's one-line message and status (0: no answer). */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

export type Params = Record<string, string | number | undefined>;

/** url builds a relative API URL, leaving out empty parameters: the API
 * rejects unknown and repeated ones, so nothing is sent by accident. */
export function url(path: string, params: Params = {}): string {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v !== undefined && v !== '') q.set(k, String(v));
  }
  const s = q.toString();
  return s ? `${path}?${s}` : path;
}

/** get fetches a URL and returns the response, or throws an ApiError with
 * the agent's message. */
export async function get(u: string, signal?: AbortSignal): Promise<Response> {
  let resp: Response;
  try {
    resp = await fetch(u, { signal, headers: { Accept: 'application/json' } });
  } catch (e) {
    if ((e as Error).name === 'AbortError') throw e;
    throw new ApiError(0, 'cannot reach the flint agent: is it still running? (start it with: sudo flint agent)');
  }
  if (!resp.ok) {
    const text = (await resp.text()).trim();
    let msg = text;
    try {
      const body = JSON.parse(text);
      if (body && typeof body.error === 'string') msg = body.error;
    } catch {
      // a plain-text error (routes outside /api/v1)
    }
    throw new ApiError(resp.status, msg || resp.statusText || `HTTP ${resp.status}`);
  }
  return resp;
}

/** getJSON fetches path with params and decodes its JSON body. */
export async function getJSON<T>(path: string, params: Params, signal?: AbortSignal): Promise<T> {
  const resp = await get(url(path, params), signal);
  return (await resp.json()) as T;
}

/** hint says what to do about an error, beyond the agent's own message. */
export function hint(e: ApiError): string {
  switch (e.status) {
    case 0:
      return 'The page could not reach the agent that served it.';
    case 400:
      return 'Fix or remove the filter, or pick a preset range: the link may have been edited by hand.';
    case 401:
      return 'This agent requires a token: reload the page and give the token as the password (any user name).';
    case 404:
      return 'This agent does not serve this: it may run without a store (--data-dir).';
    case 422:
      return 'Narrow the time range (drag over the timeline) or add a filter.';
    case 503:
      return 'The query took too long: narrow the range or add a filter.';
    default:
      return '';
  }
}

/** SeriesResponse is the body of /api/v1/series. */
export interface SeriesResponse {
  from: string;
  to: string;
  step: number;
  by: string;
  /** Seconds one sample stands for (1e-9 for time); absent when unknown. */
  period?: number;
  series: Array<{ value: string; other?: boolean; samples: number; points: Array<[number, number]> }>;
}
