// Questions the model asks the person (ask_person) in the console: plain JavaScript, no build step.
//
// A pending action whose executor is "person" is a question, not an action to approve: its card
// shows the question, one button per choice (or a text box when there are none), and answers
// with POST /questions/{id}/answer. A second answer (another tab, the CLI) is refused by the
// server (409) and the card says so. Nothing from the server is parsed as HTML (console.el).
"use strict";

(() => {
  const fc = window.fiduciaryConsole;
  const { el, shown, when } = fc;

  // the card of a question; what app.js keeps of a card (node, outcome, actions, error, ...)
  function card(event) {
    const choices = Array.isArray(event.input.choices) ? event.input.choices.map(String) : [];
    const error = el("p", { class: "error", role: "alert" });
    const outcome = el("div", { class: "outcome", "data-testid": "card-outcome", hidden: true });
    const actions = el("div", { class: "card-actions question-actions" });
    const buttons = [];
    const send = async (answer) => {
      for (const b of buttons) b.disabled = true;
      error.textContent = "";
      try {
        await fc.api("POST", `/questions/${event.approval_id}/answer`, { answer });
        if (actions.isConnected) {
          actions.replaceChildren(el("span", { class: "muted", text: `answered: ${shown(answer).text}; the run continues…` }));
        }
      } catch (e) {
        if (!outcome.hidden) return; // answered or expired meanwhile: the card says so
        error.textContent = e.message;
        for (const b of buttons) b.disabled = false;
      }
    };
    if (choices.length) {
      for (const choice of choices) {
        const button = el("button", { type: "button", class: "primary", "data-testid": "choice", text: shown(choice).text });
        button.addEventListener("click", () => send(choice));
        buttons.push(button);
        actions.append(button);
      }
    } else {
      const box = el("textarea", { rows: 2, placeholder: "your answer", "data-testid": "answer-text" });
      const answer = el("button", { type: "button", class: "primary", "data-testid": "answer", text: "Answer" });
      answer.addEventListener("click", () => {
        if (!box.value.trim()) {
          error.textContent = "Type an answer first.";
          return;
        }
        send(box.value.trim());
      });
      buttons.push(answer);
      actions.append(box, answer);
    }
    const node = el(
      "div",
      { class: "card question", "data-testid": "question-card", "data-approval": event.approval_id },
      el(
        "div",
        { class: "card-head" },
        el("div", { class: "card-what" },
          el("div", { class: "card-title", "data-testid": "question", text: shown(String(event.input.question || "")).text }),
          el("div", { class: "muted small" }, "the agent asks you · expires ", when(event.expires_at))),
      ),
      actions,
      outcome,
      error,
    );
    return { node, outcome, actions, error, confirmRow: el("div"), question: true };
  }

  // the line a resolved question shows
  function resolved(event, who) {
    if (event.decision === "client_result") return `Answered${who} at `;
    if (event.decision === "expired") return "Expired at ";
    return `Closed${who} at `;
  }

  window.fiduciaryQuestions = Object.freeze({ card, resolved });
})();
