"use strict";
// Swagger UI from the device's own files; no validator badge (it would call an outside server).
// "Try it out" sends the session's CSRF token, so the state-changing routes work from here too.
let csrfToken = null;

window.addEventListener("load", async () => {
  try {
    const response = await fetch("/api/session", {credentials: "same-origin"});
    if (response.ok) csrfToken = (await response.json()).csrf_token;
  } catch (err) {
    // Not logged in any more: the API answers 401 and says so.
  }
  window.ui = SwaggerUIBundle({
    url: "/openapi.json",
    dom_id: "#swagger-ui",
    validatorUrl: null,
    deepLinking: true,
    requestInterceptor: (request) => {
      if (csrfToken) request.headers["X-CSRF-Token"] = csrfToken;
      return request;
    },
  });
});
