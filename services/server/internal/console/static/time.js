// Shows every <time datetime> in the viewer's locale and time zone; the
// page's text (UTC) stays as it is without JavaScript.
document.addEventListener("DOMContentLoaded", function () {
  document.querySelectorAll("time[datetime]").forEach(function (el) {
    var d = new Date(el.getAttribute("datetime"));
    if (!isNaN(d)) {
      el.title = el.textContent;
      el.textContent = d.toLocaleString();
    }
  });
});
