"use strict";
// Log in with JSON (so no other site can post this form), then go to the page asked for.
function nextPage() {
  const next = new URLSearchParams(location.search).get("next") || "/";
  // Only a path on this device: never "//host" nor an address with a scheme.
  return /^\/(?![\/\\])/.test(next) ? next : "/";
}

if (new URLSearchParams(location.search).get("ended") === "account_changed") {
  const ended = document.getElementById("login-error");
  ended.textContent = "You were logged out: your account was removed, or its role or password changed.";
  ended.hidden = false;
}

document.getElementById("login-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const error = document.getElementById("login-error");
  const button = document.getElementById("login-button");
  error.hidden = true;
  button.disabled = true;
  try {
    const response = await fetch("/api/login", {
      method: "POST",
      headers: {"Content-Type": "application/json"},
      body: JSON.stringify({
        username: document.getElementById("username").value,
        password: document.getElementById("password").value,
      }),
    });
    if (response.ok) {
      location.assign(nextPage());
      return;
    }
    const body = await response.json().catch(() => ({}));
    error.textContent = body.message || `Login failed (${response.status})`;
  } catch (err) {
    error.textContent = `The device did not answer: ${err}`;
  } finally {
    button.disabled = false;
  }
  error.hidden = false;
});
