// opsbot sandbox, Teams view: the seeded people's Teams client. It polls /teams/state and
// POSTs what the person does; cards are drawn by adaptive.js.
"use strict";

const $ = (id) => document.getElementById(id);
const teams = { user: null, state: null, place: "chat", shown: "", open: new Set() };

function toast(text) {
  $("toast").textContent = text;
  $("toast").hidden = false;
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => { $("toast").hidden = true; }, 4000);
}

async function post(path, body) {
  const response = await fetch(path, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ user: teams.user, ...body }),
  });
  const data = await response.json().catch(() => ({}));
  if (!response.ok) toast(data.error || `HTTP ${response.status}`);
  else if (data.message) toast(data.message);
  poll();
  return data;
}

function messageHtml(m) {
  const initial = AC.esc((m.from || "?")[0].toUpperCase());
  const bot = m.from === "opsbot";
  const text = m.text ? `<div class="ac-text">${bot ? AC.markdown(m.text) : AC.esc(m.text)}</div>` : "";
  const cards = (m.cards || []).map((card, i) => (
    `<div class="card-holder" data-key="${AC.esc(m.key || "")}" data-card="${i}">${AC.render(card)}</div>`)).join("");
  return `<div class="message" data-id="${AC.esc(m.id)}"><div class="avatar${bot ? " teams-bot" : ""}">${initial}</div>
    <div class="body"><div class="meta"><span class="name">${AC.esc(m.from)}</span>${bot ? '<span class="app">Bot</span>' : ""}</div>${text}${cards}</div></div>`;
}

function channelHtml(messages) {
  const roots = messages.filter((m) => m.root === m.id);
  return roots.map((root) => {
    const replies = messages.filter((m) => m.root === root.id && m.id !== root.id);
    return `<div class="post" data-root="${AC.esc(root.id)}">${messageHtml(root)}
      <div class="replies-list">${replies.map(messageHtml).join("")}</div>
      <form class="reply-box" data-thread="${AC.esc(root.id)}"><input aria-label="Reply" placeholder="Reply (@opsbot …)"><button type="submit">Reply</button></form></div>`;
  }).join("");
}

function render() {
  const s = teams.state;
  $("places").innerHTML = s.places.map((p) => (
    `<li><a href="#" data-place="${p.id}" class="${p.id === teams.place ? "active" : ""}">${AC.esc(p.name)}</a></li>`)).join("");
  const place = s.places.find((p) => p.id === teams.place);
  $("conversation-title").textContent = place.id === "chat" ? place.name : `${place.name} · Team Ops`;
  $("composer-text").placeholder = place.id === "chat" ? "Type a message" : "Start a new post (@opsbot …)";
  $("typing").textContent = s.typing.includes(teams.place) ? "opsbot is typing…" : "";
  const messages = s.messages[teams.place] || [];
  const html = teams.place === "chat" ? messages.map(messageHtml).join("") : channelHtml(messages);
  if (html !== teams.shown) {
    // Keep what the person is typing in a reply box or a card's inputs across a redraw.
    const focused = document.activeElement?.closest("[data-thread]")?.dataset.thread;
    const draft = focused && document.activeElement.value;
    const scrolled = $("messages").scrollTop + $("messages").clientHeight >= $("messages").scrollHeight - 20;
    $("messages").innerHTML = html;
    teams.shown = html;
    for (const key of teams.open) {
      const box = document.querySelector(`[data-showcard="${CSS.escape(key)}"]`);
      if (box) box.hidden = false;
    }
    if (focused) {
      const input = document.querySelector(`form[data-thread="${CSS.escape(focused)}"] input`);
      if (input) { input.value = draft; input.focus(); }
    }
    if (scrolled) $("messages").scrollTop = $("messages").scrollHeight;
  }
}

let polling = false;
async function poll() {
  if (polling) return;
  polling = true;
  try {
    const response = await fetch(`/teams/state?user=${encodeURIComponent(teams.user)}`);
    const data = await response.json();
    if (data.me) {
      teams.state = data;
      render();
    }
  } catch (error) {
    toast("the sandbox is not answering");
  } finally {
    polling = false;
  }
}

function cardOf(holder) {
  const messages = teams.state.messages[teams.place] || [];
  const message = messages.find((m) => m.key === holder.dataset.key);
  return message?.cards[Number(holder.dataset.card)];
}

document.addEventListener("click", (event) => {
  const place = event.target.closest("[data-place]");
  if (place) {
    event.preventDefault();
    teams.place = place.dataset.place;
    teams.shown = "";
    render();
    return;
  }
  const toggle = event.target.closest("[data-toggle]");
  if (toggle) {
    const box = toggle.closest(".ac-card").querySelector(`[data-showcard="${CSS.escape(toggle.dataset.toggle)}"]`);
    if (box) box.hidden = !box.hidden;
    if (box && !box.hidden) teams.open.add(toggle.dataset.toggle); else teams.open.delete(toggle.dataset.toggle);
    return;
  }
  const button = event.target.closest("[data-ac]");
  if (!button) return;
  const holder = button.closest(".card-holder");
  const card = cardOf(holder);
  const action = card && AC.at(card, button.dataset.ac);
  if (!action) return;
  // Teams sends the action's data with every input of the card (a ShowCard's inputs too).
  const data = { ...AC.inputs(holder), ...(action.data || {}) };
  button.disabled = true;
  post("/teams/click", { key: holder.dataset.key, verb: action.verb || "", data });
});

document.addEventListener("submit", (event) => {
  event.preventDefault();
  const form = event.target;
  const field = form.id === "composer" ? $("composer-text") : form.querySelector("input");
  const text = field.value.trim();
  if (!text) return;
  field.value = "";
  post("/teams/say", { place: teams.place, text, thread: form.dataset.thread || "" });
});

$("composer-text").addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.shiftKey) {
    event.preventDefault();
    $("composer").requestSubmit();
  }
});

$("user-switcher").addEventListener("change", (event) => {
  teams.user = event.target.value;
  teams.shown = "";
  const url = new URL(location.href);
  url.searchParams.set("user", teams.user);
  history.replaceState(null, "", url);
  $("to-slack").href = `/?user=${encodeURIComponent(teams.user)}`;
  poll();
});

async function start() {
  const wanted = new URL(location.href).searchParams.get("user") || localStorage.getItem("opsbot-sandbox-user");
  const people = (await (await fetch("/ui/users")).json().catch(() => ({}))).users || [];
  const chosen = people.find((u) => u.name === wanted || u.id === wanted) || people[0];
  teams.user = chosen ? chosen.name : "";
  $("user-switcher").innerHTML = people.map((u) => (
    `<option value="${AC.esc(u.name)}"${u.name === teams.user ? " selected" : ""}>${AC.esc(u.real_name)} (${AC.esc(u.name)})</option>`)).join("");
  $("to-slack").href = `/?user=${encodeURIComponent(teams.user)}`;
  await poll();
  setInterval(poll, 500);
}

start();
