// Search results quote each page around the word found. Sphinx takes the page's main block whole, which in
// sphinx-book-theme begins with the header's buttons ("System Settings Light Dark") and our Colab links, in
// much whitespace: every snippet read "...Colab". Those parts are left out, and the whitespace folded.
document.addEventListener("DOMContentLoaded", () => {
  if (typeof Search === "undefined" || typeof Search.htmlToText !== "function") return;
  const pageText = Search.htmlToText;
  const notContent = [".bd-header-article", ".header-article-items", ".theme-switch-button", ".book-links",
                      ".colab-badge", ".bd-sidebar-secondary", ".prev-next-area", "nav", "footer"].join(",");
  Search.htmlToText = (htmlString, anchor) => {
    const page = new DOMParser().parseFromString(htmlString, "text/html");
    page.querySelectorAll(notContent).forEach((element) => element.remove());
    return pageText(page.documentElement.outerHTML, anchor).replace(/\s+/g, " ").trim();
  };
});
