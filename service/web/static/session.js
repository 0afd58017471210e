// Who is signed in: GET /auth/me (name, scope) for the views that offer scope-dependent actions (delete: admin).

import { api } from "./api.js";

let cached = null; // {at, promise}

/* The caller's {name, scope, anonymous}, or null when the service does not say (no token, error). */
export function whoAmI(signal) {
  if (!cached || Date.now() - cached.at > 30_000) {
    cached = { at: Date.now(), promise: api("/auth/me", { signal }).catch(() => null) };
  }
  return cached.promise.then((me) => {
    if (me === null) cached = null;
    return me;
  });
}
