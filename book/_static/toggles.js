// The menu and contents buttons at every width (pydata-sphinx-theme#2451). The page holds two of each: the
// navbar's, hidden, and the article header's, the one a reader taps. pydata-sphinx-theme (its modal sidebars
// below 992 px) and sphinx-book-theme (collapsing the sidebar above) each bind only the first they find, the
// hidden one, so the visible buttons did nothing. A tap on any other one is handed to the first: both
// themes then do what they do for it, at the width they do it.
document.addEventListener("DOMContentLoaded", () => {
  for (const kind of ["primary", "secondary"]) {
    const [bound, ...others] = document.querySelectorAll(`.${kind}-toggle`);
    for (const button of others) {
      button.addEventListener("click", (event) => {
        event.preventDefault();
        event.stopPropagation();
        bound.click();
      });
    }
  }
});
