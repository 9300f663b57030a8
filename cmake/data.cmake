# cmake/data.cmake: targets and tests of this component (filled in by its owner).
