"use strict";
// Swagger UI from the device's own files; no validator badge (it would call an outside server).
window.addEventListener("load", () => {
  window.ui = SwaggerUIBundle({
    url: "/openapi.json",
    dom_id: "#swagger-ui",
    validatorUrl: null,
    deepLinking: true,
    withCredentials: true,
    requestInterceptor: (request) => {
      const token = sessionStorage.getItem("csrf_token");
      if (token) request.headers["X-CSRF-Token"] = token;
      return request;
    },
  });
});
