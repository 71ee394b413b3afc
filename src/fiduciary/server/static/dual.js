// Dual control in the console: plain JavaScript, no build step.
//
// An approval under dual control needs N distinct approvers of a named group (never the
// proposer). Its card says where the set stands, "1 of 2 approved (alice, 12:03)" (the
// server's `dual_control.progress`), and that an edit started a new set. A member of the
// group who did not start the run cannot open it: the pending list opens the approval's own
// card here instead (GET /approvals/{id}), with Approve (signed when the policy says so) and Deny.
// Nothing from the server is parsed as HTML: every string goes in as text (console.el).
"use strict";

(() => {
  const $ = (id) => document.getElementById(id);
  const fc = window.fiduciaryConsole;
  const { el, shown, shownValue, usd, when } = fc;
  const clock = (at) => new Date(at).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", hourCycle: "h23" });

  // the server's progress text, its times in the viewer's zone: "1 of 2 approved (bob, 12:03)"
  function progressLine(dual) {
    const who = dual.approvals.map((v) => `${shown(v.approver).text}, ${clock(v.at)}`).join(", ");
    let text = `${dual.approvals.length} of ${dual.required} approved${who ? ` (${who})` : ""}`;
    if (dual.edited || dual.superseded.length) text += "; an edit started a new approval set";
    return el("div", { class: "dual-progress", "data-testid": "dual-progress" },
      el("strong", { text: `${shown(dual.group).text}: ` }), text);
  }

  // the progress line of a card in the conversation, kept to date by the approval's JSON
  async function showProgress(card, approvalId, given) {
    let approval = given;
    try {
      approval = approval || (await fc.api("GET", `/approvals/${approvalId}`));
    } catch (_) {
      return; // the card still works without the line
    }
    if (approval.status === "pending" && approval.signature_required && !card.querySelector(".signing-note")) {
      card.querySelector(".card-head").after(signingNote());
    }
    if (!approval.dual_control) return approval;
    const line = progressLine(approval.dual_control);
    const old = card.querySelector(".dual-progress");
    if (old) old.replaceWith(line);
    else card.querySelector(".card-head").after(line);
    if (approval.status === "pending") showVotedOn(card, approval);
    if (approval.status === "pending" && !mayApprove(approval)) notForYou(card, approval.dual_control);
    return approval;
  }

  // after an approver's edit the set votes on the edited arguments: the card shows those
  function showVotedOn(card, approval) {
    const args = card.querySelector("[data-testid=args]");
    if (args) args.textContent = shownValue(approval.args, 2).text;
    const digest = card.querySelector(".digest");
    if (digest) digest.textContent = `sha256 ${approval.args_digest}`;
    const amount = card.querySelector("[data-testid=amount]");
    if (amount) amount.textContent = usd(approval.amount_usd);
    card.dataset.argsDigest = approval.args_digest;
    // the editable fields start from the arguments shown (an untouched one is not an edit)
    for (const input of card.querySelectorAll("[data-field]")) {
      const value = approval.args[input.dataset.field];
      const text = value === undefined || value === null ? "" : typeof value === "object" ? JSON.stringify(value) : String(value);
      if (input.dataset.original === text || document.activeElement === input) continue;
      input.value = text;
      input.dataset.original = text;
    }
    card.classList.toggle("edited-set", Boolean(approval.edited));
  }

  // the proposer (and anyone outside the group) cannot approve: no Approve button, a line instead
  const mayApprove = (approval) => {
    const me = fc.principal();
    return me !== approval.principal && approval.dual_control.members.includes(me);
  };
  function notForYou(card, dual) {
    const approve = card.querySelector("[data-testid=approve]");
    if (approve) approve.remove();
    const edits = card.querySelector(".edits");
    if (edits) edits.remove(); // nothing to approve: nothing to edit
    if (card.querySelector("[data-testid=needs-approvers]")) return;
    const line = el("div", { class: "muted needs-approvers", "data-testid": "needs-approvers",
      text: `This action needs ${dual.required} approvers of ${shown(dual.group).text}, not you: they approve it from their console.` });
    const actions = card.querySelector(".card-actions");
    if (actions) actions.before(line);
    else card.append(line);
  }

  const signingNote = () => el("div", { class: "signing-note", "data-testid": "signing-note",
    text: "Approve signs this action with your passkey: your device will ask you to confirm it is you." });

  // the owner's open cards follow the votes of the others (they send this tab no event)
  setInterval(() => {
    if (!fc.key()) return;
    for (const card of document.querySelectorAll("[data-testid=pending-card]:not(.resolved)")) {
      if (card.querySelector(".dual-progress")) showProgress(card, card.dataset.approval);
    }
  }, 5000);

  // the card of an approval whose run this principal cannot open: a member of its group. The
  // pending list's copy may predate a vote or an edit: the card shows the approval as it is now
  async function openVote(listed) {
    let approval = listed;
    try {
      approval = await fc.api("GET", `/approvals/${listed.approval_id}`);
    } catch (_) {
      // the list's copy: the approve call still checks the digest against the current set
    }
    const dialog = $("vote-dialog");
    const error = el("p", { class: "error", role: "alert" });
    const approve = el("button", { type: "button", class: "primary", "data-testid": "approve", text: "Approve" });
    const deny = el("button", { type: "button", class: "danger", "data-testid": "deny", text: "Deny" });
    const close = el("button", { type: "button", "data-testid": "close-vote", text: "Close", onclick: () => dialog.close() });
    const actions = el("div", { class: "card-actions" }, approve, deny, close);
    const card = el("div", { class: `card ${approval.tier}`, "data-testid": "vote-card", "data-approval": approval.approval_id },
      el("div", { class: "card-head" },
        el("div", { class: "card-what" },
          el("div", { class: "card-title", text: shown(approval.description || approval.capability).text }),
          el("div", { class: "muted small" }, `${shown(approval.capability).text} · expires `, when(approval.expires_at))),
        el("div", { class: "card-price" }, el("span", { class: "tier", text: approval.tier }), " ",
          el("span", { class: "amount", "data-testid": "amount", text: usd(approval.amount_usd) }))),
      approval.signature_required ? signingNote() : null,
      approval.dual_control ? progressLine(approval.dual_control) : null,
      el("pre", { class: "args", "data-testid": "args", text: shownValue(approval.args, 2).text }),
      el("div", { class: "digest", text: `sha256 ${approval.args_digest}` }),
      actions, error);
    const busy = (on) => { approve.disabled = on; deny.disabled = on; };
    const after = (decided) => {
      if (decided.dual_control) card.querySelector(".dual-progress").replaceWith(progressLine(decided.dual_control));
      actions.replaceChildren(el("span", { class: "muted", "data-testid": "vote-outcome",
        text: decided.status === "pending" ? "Your approval is counted; the run waits for the rest." : `This action is ${decided.status}.` }), close);
      fc.refreshLists();
    };
    approve.addEventListener("click", async () => {
      busy(true);
      error.textContent = "";
      const path = `/approvals/${approval.approval_id}/approve`;
      const body = { args_digest: approval.args_digest };
      try {
        let decided;
        try {
          decided = await fc.api("POST", path, body);
        } catch (e) {
          if (e.code !== "signature_required" || !window.PublicKeyCredential) throw e;
          body.assertion = await fc.signApproval(approval.approval_id, body);
          decided = await fc.api("POST", path, body);
        }
        after(decided);
      } catch (e) {
        error.textContent = e.message;
        busy(false);
      }
    });
    deny.addEventListener("click", async () => {
      busy(true);
      error.textContent = "";
      try {
        after(await fc.api("POST", `/approvals/${approval.approval_id}/deny`, { reason: "" }));
      } catch (e) {
        error.textContent = e.message;
        busy(false);
      }
    });
    dialog.replaceChildren(card);
    if (!dialog.open) dialog.showModal();
  }

  window.fiduciaryDual = Object.freeze({ showProgress, openVote });
})();
