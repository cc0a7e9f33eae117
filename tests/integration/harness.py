# harness placeholder
