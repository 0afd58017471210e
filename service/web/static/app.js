// Entry point (loaded by index.html as a module): the hash-route table and boot; the views live in their own modules.
/* fp8-policy dashboard: a dependency-free single-page app over the /api/v1 endpoints, as native ES modules.
 *
 * Routes (URL hash): #/runs?project=&tag=&status=&q=&sort=&dir=   runs list: filters, search, sort, stored summaries
 *                    #/runs/<id>?layer=&tensor=&rank=&rec=...    run page (its state is in the hash: run.js)
 *                    #/compare?runs=<id>,<id>,...    2-8 runs side by side (?base=&head= still works)
 *                    #/upload                        drag & drop upload with progress and live status
 * Every view renders into #view; leaving a view aborts its requests and timers (router.js). API errors
 * ({"error", "detail"}) are shown inline where the data would have been (api.js).
 */
import { initAuth } from "./auth.js";
import "./colors.js"; // first: the severity colours (CSS custom properties) before any view renders
import { start } from "./router.js";
import { runsView } from "./runs.js";
import { runView } from "./run.js";
import { compareView } from "./compare.js";
import { uploadView } from "./upload.js";

initAuth();
start([
  [/^\/runs$/, "runs", (ctx, m, q) => runsView(ctx, q)],
  [/^\/runs\/(\d+)$/, "runs", (ctx, m, q) => runView(ctx, Number(m[1]), q)],
  [/^\/compare$/, "compare", (ctx, m, q) => compareView(ctx, q)],
  [/^\/upload$/, "upload", (ctx) => uploadView(ctx)],
]);
