// Deployment page: the scale form starts from the chosen stage's current replica count.
const stage = document.getElementById("scale-stage");
const replicas = document.getElementById("scale-replicas");
if (stage && replicas) {
  stage.addEventListener("change", () => { replicas.value = stage.selectedOptions[0].dataset.replicas; });
}
