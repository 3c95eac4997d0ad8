// Shows only the fieldset of the destination kind chosen in the
// subscription form. Without JavaScript every kind's fieldset is shown and
// the server reads the chosen kind's fields alone.
document.addEventListener("DOMContentLoaded", function () {
  var kind = document.getElementById("f-kind");
  if (!kind) {
    return;
  }
  function show() {
    document.querySelectorAll("fieldset.destination[data-kind]").forEach(function (fs) {
      fs.hidden = fs.getAttribute("data-kind") !== kind.value;
    });
    var hint = document.getElementById("kind-hint");
    if (hint) {
      hint.hidden = true;
    }
  }
  kind.addEventListener("change", show);
  show();
});
