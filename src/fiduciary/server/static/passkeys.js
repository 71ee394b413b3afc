// The console's "Passkeys" panel: plain JavaScript, no build step.
//
// A principal's passkeys (GET /passkeys: name, created, last used), a new one registered with
// a name (POST /passkeys/registration-options, navigator.credentials.create, POST /passkeys),
// one revoked (DELETE /passkeys/{id}). The panel stays hidden where the server has no passkeys
// configured (not_available). Nothing from the server is parsed as HTML (console.el).
"use strict";

(() => {
  const $ = (id) => document.getElementById(id);
  const fc = window.fiduciaryConsole;
  const { el, shown, when, fromB64, toB64 } = fc;

  async function refresh() {
    let found;
    try {
      found = await fc.api("GET", "/passkeys");
    } catch (_) {
      $("passkeys-panel").hidden = true; // not configured here, or not the scope to decide
      return;
    }
    $("passkeys-panel").hidden = false;
    const rows = found.passkeys.map((p) =>
      el("li", { "data-testid": "passkey", "data-credential": p.credential_id, class: p.revoked_at ? "revoked" : null },
        el("span", { class: "passkey-name", "data-testid": "passkey-label", text: shown(p.name).text }),
        p.revoked_at ? null : el("button", { type: "button", class: "ghost small", "data-testid": "passkey-revoke", text: "Revoke",
          onclick: () => revoke(p) }),
        el("span", { class: "sub" }, "created ", when(p.created_at), " · ",
          p.revoked_at ? el("span", {}, "revoked ", when(p.revoked_at))
            : p.last_used_at ? el("span", {}, "last used ", when(p.last_used_at)) : "never used")));
    $("passkey-list").replaceChildren(...(rows.length ? rows : [el("li", { class: "muted", text: "None yet: register this device to sign approvals." })]));
  }

  async function revoke(passkey) {
    $("passkey-error").textContent = "";
    if (!window.confirm(`Revoke the passkey "${passkey.name}"? It will sign no more approvals.`)) return;
    try {
      await fc.api("DELETE", `/passkeys/${encodeURIComponent(passkey.credential_id)}`);
    } catch (e) {
      $("passkey-error").textContent = e.message;
    }
    await refresh();
  }

  async function register(name) {
    const { options } = await fc.api("POST", "/passkeys/registration-options");
    const publicKey = {
      ...options,
      challenge: fromB64(options.challenge),
      user: { ...options.user, id: fromB64(options.user.id) },
      excludeCredentials: (options.excludeCredentials || []).map((c) => ({ ...c, id: fromB64(c.id) })),
    };
    const made = await navigator.credentials.create({ publicKey });
    const credential = {
      id: made.id,
      rawId: toB64(made.rawId),
      type: made.type,
      response: {
        clientDataJSON: toB64(made.response.clientDataJSON),
        attestationObject: toB64(made.response.attestationObject),
      },
    };
    await fc.api("POST", "/passkeys", { credential, name });
  }

  $("passkey-form").addEventListener("submit", async (e) => {
    e.preventDefault();
    const button = $("passkey-form").querySelector("button");
    $("passkey-error").textContent = "";
    if (!window.PublicKeyCredential) {
      $("passkey-error").textContent = "This browser cannot make passkeys.";
      return;
    }
    button.disabled = true;
    try {
      await register($("passkey-name").value.trim());
      $("passkey-name").value = "";
    } catch (error) {
      $("passkey-error").textContent = error.message;
    } finally {
      button.disabled = false;
    }
    await refresh();
  });
  document.addEventListener("fiduciary:signin", refresh);
  document.addEventListener("fiduciary:signout", () => {
    $("passkeys-panel").hidden = true;
    $("passkey-list").replaceChildren();
  });
  if (fc.key()) refresh(); // signed in before this script ran
})();
