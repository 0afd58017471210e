// A view's state in the URL hash (#/path?key=value&...): read with get(), written with set() through
// history.replaceState (router.replaceHash: not once the user has navigated elsewhere), so the URL is a deep
// link to what is on screen without re-rendering the view.

import { qs } from "./api.js";
import { replaceHash } from "./router.js";

export function hashState(ctx, path, query) {
  const params = new URLSearchParams(query ? query.toString() : "");
  return {
    get(key, fallback = "") {
      const value = params.get(key);
      return value === null ? fallback : value;
    },
    set(updates) {
      for (const [key, value] of Object.entries(updates)) {
        if (value === null || value === undefined || value === "" || value === false) params.delete(key);
        else params.set(key, value === true ? "1" : String(value));
      }
      replaceHash(ctx, `#${path}${qs(Object.fromEntries(params))}`);
    },
    /* Every parameter as an object (to navigate with changes). */
    all() {
      return Object.fromEntries(params);
    },
  };
}
