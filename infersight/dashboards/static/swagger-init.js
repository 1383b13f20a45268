// Starts Swagger UI on /docs (api/docs.py). The page's CSP admits no inline script, so the
// settings live here; the OpenAPI document's URL is the page's data-openapi-url.
"use strict";
(function () {
  var root = document.getElementById("swagger-ui");
  window.ui = SwaggerUIBundle({
    url: root.dataset.openapiUrl,
    dom_id: "#swagger-ui",
    layout: "BaseLayout",
    presets: [SwaggerUIBundle.presets.apis],
    deepLinking: true,
    showExtensions: true,
    showCommonExtensions: true,
    // No badge from the public validator: the page loads nothing from elsewhere.
    validatorUrl: null,
  });
})();
