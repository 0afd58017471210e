// Starts Swagger UI on /docs. A file, not an inline <script>: the HTML pages' Content-Security-Policy
// allows scripts from this origin only. The options are those of Swagger UI's configuration page (swagger-ui docs).
"use strict";

window.addEventListener("DOMContentLoaded", () => {
  const root = document.getElementById("swagger-ui");
  window.ui = SwaggerUIBundle({
    url: root.dataset.openapiUrl,
    dom_id: "#swagger-ui",
    layout: "BaseLayout",
    deepLinking: true,
    showExtensions: true,
    showCommonExtensions: true,
    displayRequestDuration: true,
    validatorUrl: null, // the default validator badge would call validator.swagger.io
    presets: [SwaggerUIBundle.presets.apis, SwaggerUIBundle.SwaggerUIStandalonePreset],
  });
});
