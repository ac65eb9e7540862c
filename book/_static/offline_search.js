/* Search from disk. Sphinx's search page loads its index with a <script> tag, which works on file:// pages, but it
   fetch()es every result page to show a summary under the title, and browsers refuse fetch() between file:// pages
   (one CORS error per result, titles only). scripts/build_book.py writes the main content of every page into
   _static/search_pages.js (window.ATTN_SEARCH_PAGES, keyed by the page's path from the site root); this answers the
   search page's fetches of those pages from it, on disk and on a server alike, and passes every other fetch on. */
(function () {
  "use strict";
  const pages = window.ATTN_SEARCH_PAGES || {};
  const realFetch = window.fetch ? window.fetch.bind(window) : null;
  window.fetch = function (resource, options) {
    try {
      const url = new URL(typeof resource === "string" ? resource : resource.url, document.baseURI);
      const root = new URL(document.documentElement.dataset.content_root || "./", document.baseURI);
      if (url.href.startsWith(root.href)) {
        const key = decodeURIComponent(url.pathname.slice(root.pathname.length));
        if (Object.prototype.hasOwnProperty.call(pages, key)) {
          return Promise.resolve(new Response(pages[key], { headers: { "Content-Type": "text/html" } }));
        }
      }
    } catch (e) {
      /* not a URL we know: the real fetch decides */
    }
    return realFetch(resource, options);
  };
})();
